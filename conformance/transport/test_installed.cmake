# The installed battery from an out-of-tree project: installs the build
# tree into a scratch prefix, configures and builds the project in
# SOURCE_DIR (consumer/) against it through find_package(dpl), and runs
# its CTest, whose test runs bin/dpl-conformance on the project's module.
# Run with -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=...
# [-DCONF_ARGS="--filter=caps/*"].
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc)
  message(FATAL_ERROR "cmake --install failed (${rc}); the whole tree must be built:\n${out}")
endif()
file(GLOB _fn ${WORK_DIR}/prefix/lib*/cmake/dpl/DplTransportConformance.cmake
              ${WORK_DIR}/prefix/lib/*/cmake/dpl/DplTransportConformance.cmake)
if(NOT EXISTS ${WORK_DIR}/prefix/bin/dpl-conformance OR NOT _fn)
  message(FATAL_ERROR "not installed: bin/dpl-conformance or "
                      "<libdir>/cmake/dpl/DplTransportConformance.cmake")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build
                -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix "-DMYNET_CONF_ARGS=${CONF_ARGS}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc)
  message(FATAL_ERROR "find_package(dpl) project configure failed:\n${out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc)
  message(FATAL_ERROR "project build failed:\n${out}")
endif()
execute_process(COMMAND ${CMAKE_CTEST_COMMAND} --test-dir ${WORK_DIR}/build
                --output-on-failure
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message(STATUS "ctest of the out-of-tree project:\n${out}")
if(rc)
  message(FATAL_ERROR "the battery failed on the out-of-tree module (${rc})")
endif()
if(NOT out MATCHES "conformance_mynet .*Passed")
  message(FATAL_ERROR "conformance_mynet did not run or pass")
endif()
