# Helpers every test may include (tests/support: loopback ports,
# schedule utilities, the reference replay).
if(NOT TARGET dpl_test_support)
  add_library(dpl_test_support INTERFACE)
  target_include_directories(dpl_test_support INTERFACE ${PROJECT_SOURCE_DIR}/tests/support)
endif()

# Jobs of ranks as processes or threads (tests/support/test_job.h), over
# the static twins of the core and the bootstrap; no test framework.
if(NOT TARGET dpl_test_job)
  find_package(Threads REQUIRED)
  set(_tj ${PROJECT_SOURCE_DIR}/tests/support)
  add_library(dpl_test_job STATIC ${_tj}/test_job.c ${_tj}/test_job_rank.c
    ${_tj}/test_job_util.c)
  target_link_libraries(dpl_test_job PUBLIC dpl_test_support dpl_bootstrap_testlib
    dpl_testlib Threads::Threads PRIVATE $<BUILD_INTERFACE:dpl_warnings>)
endif()

# dpl_test_uses_cli(target): the test runs the `dpl` binary; it gets
# DPL_CLI_PATH and a build dependency once bindings/cli is configured.
function(dpl_test_uses_cli target)
  set_property(GLOBAL APPEND PROPERTY DPL_CLI_TESTS ${target})
endfunction()

# dpl_add_test(NAME name SOURCES ... [LIBS ...] [TIMEOUT s])
# A Criterion test binary registered with CTest. Reports go to a file so the
# Criterion summary line ("[====] Synthesis: ...") stays on stderr.
function(dpl_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} dpl_test_support PkgConfig::CRITERION $<BUILD_INTERFACE:dpl_warnings>)
  target_compile_definitions(${T_NAME} PRIVATE
    DPL_PROFILES_DIR="${DPL_PROFILES_DIR}"
    DPL_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
    DPL_BINARY_DIR="${CMAKE_BINARY_DIR}")
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} --jobs=2
           --xml=${CMAKE_CURRENT_BINARY_DIR}/${T_NAME}.xml)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT})
endfunction()
