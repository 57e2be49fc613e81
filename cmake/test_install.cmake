# Installs the build tree into a scratch prefix and builds the consumer
# project against it twice: through find_package(dpl) and through dpl.pc.
# Run with -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=...
file(REMOVE_RECURSE ${WORK_DIR})
unset(ENV{LD_LIBRARY_PATH})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
foreach(f include/dpl/dpl.h include/dpl/schedule.h include/dpl/transport_inproc.h include/dpl/sim.h)
  if(NOT EXISTS ${WORK_DIR}/prefix/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer
                -B ${WORK_DIR}/cmake-build -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
                -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc)
  message(FATAL_ERROR "find_package(dpl) consumer configure failed:\n${out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/cmake-build
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc)
  message(FATAL_ERROR "consumer build failed:\n${out}")
endif()
execute_process(COMMAND ${WORK_DIR}/cmake-build/consumer RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc)
  message(FATAL_ERROR "consumer (find_package) failed: ${out}")
endif()
message(STATUS "find_package consumer: ${out}")
# pkg-config
find_program(PKG_CONFIG pkg-config REQUIRED)
file(GLOB pcdir ${WORK_DIR}/prefix/lib*/pkgconfig ${WORK_DIR}/prefix/lib/*/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "${pcdir}")
# A static install is consumed with --static (Libs.private: -lm ...).
file(GLOB _shared ${WORK_DIR}/prefix/lib*/libdpl.so ${WORK_DIR}/prefix/lib/*/libdpl.so)
set(static_flag "")
if(NOT _shared)
  set(static_flag --static)
endif()
execute_process(COMMAND ${PKG_CONFIG} ${static_flag} --cflags --libs dpl dpl-sim dpl-transport-inproc OUTPUT_VARIABLE flags
                RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(rc)
  message(FATAL_ERROR "pkg-config dpl failed")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
execute_process(COMMAND cc -std=c11 ${SOURCE_DIR}/tests/consumer/main.c ${flags}
                -pthread -o ${WORK_DIR}/pc-consumer RESULT_VARIABLE rc ERROR_VARIABLE out)
if(rc)
  message(FATAL_ERROR "pkg-config consumer build failed:\n${out}")
endif()
# Both consumers run without LD_LIBRARY_PATH: RUNPATH finds the prefix.
unset(ENV{LD_LIBRARY_PATH})
execute_process(COMMAND ${WORK_DIR}/pc-consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc)
  message(FATAL_ERROR "consumer (pkg-config) failed: ${out}")
endif()
message(STATUS "pkg-config consumer: ${out}")

# Installed programs find their libraries too (RUNPATH $ORIGIN/../lib).
file(GLOB _dpl_bin ${WORK_DIR}/prefix/bin/dpl)
if(_dpl_bin)
  execute_process(COMMAND ${_dpl_bin} schedule --stages 2 --microbatches 2 --policy 1f1b
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc)
    message(FATAL_ERROR "installed dpl does not run without LD_LIBRARY_PATH: ${out}")
  endif()
  message(STATUS "installed dpl runs: ok")
endif()
