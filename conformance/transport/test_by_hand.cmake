# test_by_hand.cmake - the battery run by hand, without the environment
# its registration sets (the test conformance_inproc_by_hand): with
# DPL_CONF_RANKS and DPL_CONF_BOOTSTRAP unset it must find by itself that
# an in-process module's ranks are threads meeting by name (not hang on a
# bootstrap until the deadline), pass, and write the reason of every
# skipped test into its XML report.
#   -DEXE=dpl-conformance-<in-process module>  -DXML=report
#   -DFILTER=suite/test glob  -DSKIP=text of an expected skip reason
foreach(v EXE XML FILTER SKIP)
  if(NOT DEFINED ${v} OR "${${v}}" STREQUAL "")
    message(FATAL_ERROR "test_by_hand.cmake: -D${v}= is required")
  endif()
endforeach()
unset(ENV{DPL_CONF_RANKS})
unset(ENV{DPL_CONF_BOOTSTRAP})
file(REMOVE ${XML})
execute_process(COMMAND ${EXE} --jobs=1 --filter=${FILTER} --xml=${XML}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 50)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the battery run by hand failed: ${rc}")
endif()
if(NOT "${err}" MATCHES "so its ranks run as threads")
  message(FATAL_ERROR "the battery did not find that the module is in-process")
endif()
if(NOT "${err}" MATCHES "Synthesis: Tested: [1-9][0-9]* \\| Passing: [1-9]")
  message(FATAL_ERROR "the battery ran no test")
endif()
file(READ ${XML} xml)
string(FIND "${xml}" "<skipped message=\"${SKIP}" at)
if(at LESS 0)
  message(FATAL_ERROR "the XML report has no skip reason '${SKIP}...':\n${xml}")
endif()
string(FIND "${xml}" "<skipped/>" bare)
if(NOT bare LESS 0)
  message(FATAL_ERROR "the XML report has a skipped test without its reason")
endif()
message("by hand: in-process found, skip reasons in the XML report")
