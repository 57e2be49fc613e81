# DplTransportConformance.cmake - dpl_add_transport_conformance(): run
# dpl's transport conformance battery on a transport module as a CTest
# test, in dpl's own tree and in a backend author's project after
# find_package(dpl) (installed as <libdir>/cmake/dpl/, beside
# dplConfig.cmake). See conformance/README.md.
#
# dpl_add_transport_conformance(NAME name (LIB target | MODULE path|name)
#                               [TABLE symbol] [VARIANT v]
#                               [ENV "K=V" ...] [ARGS ...] [TIMEOUT s])
#
# Registers the test conformance_<NAME>[_<VARIANT>]: the battery with the
# environment ENV (a ';' inside a value is written $<SEMICOLON>) and the
# extra arguments ARGS (the runner's --ranks, --bootstrap, --options and
# Criterion's own), one test at a time (--jobs=1), alone (RUN_SERIAL: it
# counts /dev/shm entries and times things), labelled `conformance`, with
# its report in conformance_<...>.xml of the current binary directory so
# that Criterion's Synthesis line stays on stderr. TIMEOUT defaults to
# 1800 s.
#
# How the battery reaches the module:
#  - LIB where the battery is built in the same project (dpl's tree, or
#    a project that adds dpl with add_subdirectory): the battery is
#    linked with LIB into dpl-conformance-<NAME> (once per NAME), whose
#    table is the symbol TABLE (default dpl_transport_<NAME>). Static and
#    shared modules both work.
#  - LIB after find_package(dpl): LIB is a SHARED or MODULE library
#    target that exports dpl_transport_plugin_v1() (dpl/transport_load.h);
#    the installed runner dpl::conformance (bin/dpl-conformance) loads it
#    with dpl_transport_load() (--transport $<TARGET_FILE:LIB>). TABLE is
#    not used: the entry point returns the table.
#  - MODULE: a path to such a library, or a module name the dynamic
#    linker finds (libdpl-transport-<name>.so), run by the same runner.

function(dpl_add_transport_conformance)
  cmake_parse_arguments(C "" "NAME;LIB;MODULE;TABLE;VARIANT;TIMEOUT" "ENV;ARGS" ${ARGN})
  if(C_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "dpl_add_transport_conformance: unknown arguments: ${C_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT C_NAME OR (NOT C_LIB AND NOT C_MODULE) OR (C_LIB AND C_MODULE))
    message(FATAL_ERROR "dpl_add_transport_conformance: NAME and one of LIB or MODULE are required")
  endif()
  if(NOT C_TABLE)
    set(C_TABLE dpl_transport_${C_NAME})
  endif()
  if(NOT C_TIMEOUT)
    set(C_TIMEOUT 1800)
  endif()
  set(test conformance_${C_NAME})
  if(C_VARIANT)
    string(APPEND test _${C_VARIANT})
  endif()

  if(C_LIB AND TARGET dpl_conformance_battery)
    # Built here: link the battery with the module.
    set(exe dpl-conformance-${C_NAME})
    if(NOT TARGET ${exe})
      add_executable(${exe} ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/linked.c)
      target_compile_definitions(${exe} PRIVATE DPL_CONF_TABLE=${C_TABLE})
      target_link_libraries(${exe} PRIVATE dpl_conformance_battery ${C_LIB})
      if(TARGET dpl_warnings)
        target_link_libraries(${exe} PRIVATE $<BUILD_INTERFACE:dpl_warnings>)
      endif()
    endif()
    set(cmd $<TARGET_FILE:${exe}>)
  else()
    # The runner loads the module at run time.
    if(TARGET dpl-conformance)
      set(runner $<TARGET_FILE:dpl-conformance>)
    elseif(TARGET dpl::conformance)
      set(runner $<TARGET_FILE:dpl::conformance>)
    else()
      message(FATAL_ERROR "dpl_add_transport_conformance(${C_NAME}): this dpl has no "
        "conformance runner (dpl::conformance); build dpl with -DDPL_BUILD_CONFORMANCE=ON "
        "(needs Criterion) and call find_package(dpl) first")
    endif()
    if(C_LIB)
      if(NOT TARGET ${C_LIB})
        message(FATAL_ERROR "dpl_add_transport_conformance(${C_NAME}): LIB ${C_LIB} is not a target")
      endif()
      get_target_property(type ${C_LIB} TYPE)
      if(NOT type MATCHES "^(SHARED|MODULE)_LIBRARY$")
        message(FATAL_ERROR "dpl_add_transport_conformance(${C_NAME}): LIB ${C_LIB} is a "
          "${type}; the installed battery loads its module at run time, so LIB must be a "
          "SHARED or MODULE library exporting dpl_transport_plugin_v1() (dpl/transport_load.h)")
      endif()
      set(module $<TARGET_FILE:${C_LIB}>)
    else()
      set(module ${C_MODULE})
    endif()
    set(cmd ${runner} --transport ${module})
  endif()

  add_test(NAME ${test}
           COMMAND ${CMAKE_COMMAND} -E env ${C_ENV}
                   ${cmd} --jobs=1
                   --xml=${CMAKE_CURRENT_BINARY_DIR}/${test}.xml ${C_ARGS})
  set_tests_properties(${test} PROPERTIES TIMEOUT ${C_TIMEOUT}
                       RUN_SERIAL TRUE LABELS conformance)
endfunction()
