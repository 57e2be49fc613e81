# dpl_add_transport_conformance(NAME name LIB target [TABLE symbol]
#                               [VARIANT v] [ENV "K=V" ...] [ARGS ...]
#                               [TIMEOUT s])
#
# Links the transport battery with the module library LIB into
# dpl-conformance-<NAME> (once per NAME; the table is `TABLE`, by default
# dpl_transport_<NAME>) and registers the CTest test
# conformance_<NAME>[_<VARIANT>] running it with the environment ENV
# (a ';' inside a value is written $<SEMICOLON>) and the extra
# arguments ARGS. Tests run one at a time (--jobs=1) and write their
# report to conformance_<...>.xml, so Criterion's Synthesis line stays
# on stderr.
set(DPL_CONF_DIR ${CMAKE_CURRENT_LIST_DIR})

function(dpl_add_transport_conformance)
  cmake_parse_arguments(C "" "NAME;LIB;TABLE;VARIANT;TIMEOUT" "ENV;ARGS" ${ARGN})
  if(NOT C_NAME OR NOT C_LIB)
    message(FATAL_ERROR "dpl_add_transport_conformance: NAME and LIB are required")
  endif()
  if(NOT C_TABLE)
    set(C_TABLE dpl_transport_${C_NAME})
  endif()
  if(NOT C_TIMEOUT)
    set(C_TIMEOUT 1800)
  endif()
  set(exe dpl-conformance-${C_NAME})
  if(NOT TARGET ${exe})
    add_executable(${exe} $<TARGET_OBJECTS:dpl_conformance_battery>
                   ${DPL_CONF_DIR}/linked.c)
    target_compile_definitions(${exe} PRIVATE DPL_CONF_TABLE=${C_TABLE})
    target_link_libraries(${exe} PRIVATE ${C_LIB} dpl PkgConfig::CRITERION
                          Threads::Threads m ${CMAKE_DL_LIBS} $<BUILD_INTERFACE:dpl_warnings>)
  endif()
  set(test conformance_${C_NAME})
  if(C_VARIANT)
    string(APPEND test _${C_VARIANT})
  endif()
  add_test(NAME ${test}
           COMMAND ${CMAKE_COMMAND} -E env ${C_ENV}
                   $<TARGET_FILE:${exe}> --jobs=1
                   --xml=${CMAKE_CURRENT_BINARY_DIR}/${test}.xml ${C_ARGS})
  # Alone: the battery counts /dev/shm entries and times things.
  set_tests_properties(${test} PROPERTIES TIMEOUT ${C_TIMEOUT}
                       RUN_SERIAL TRUE LABELS conformance)
endfunction()
