# check_mutant.cmake - run the battery on one mutant and pass only when it
# fails it where it should (the CTest tests mutant_<N>_<rule>).
#   -DEXE=dpl-conformance-mutant  -DMUTANT=N  -DFILTER=suite/test
#   -DFAILED=suite::test (must be reported failed)
#   -DEXPECT=regex (must appear in the battery's output; may be empty)
#   -DXML=report  -DENVS="K=V;..." (the registration's environment)
foreach(v EXE MUTANT FILTER FAILED XML)
  if(NOT DEFINED ${v} OR "${${v}}" STREQUAL "")
    message(FATAL_ERROR "check_mutant.cmake: -D${v}= is required")
  endif()
endforeach()
foreach(kv ${ENVS})
  string(FIND "${kv}" "=" eq)
  string(SUBSTRING "${kv}" 0 ${eq} k)
  math(EXPR eq "${eq} + 1")
  string(SUBSTRING "${kv}" ${eq} -1 val)
  set(ENV{${k}} "${val}")
endforeach()
execute_process(
  COMMAND ${EXE} --jobs=1 --options mutant=${MUTANT} --filter=${FILTER}
          --xml=${XML}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 110)
set(all "${out}${err}")
message("${all}")
if(rc EQUAL 0)
  message(FATAL_ERROR "mutant ${MUTANT}: the battery passed it (${FILTER}); "
                      "the rule it breaks is not checked")
endif()
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "mutant ${MUTANT}: the battery did not finish: ${rc}")
endif()
string(REPLACE ":" "[:]" failed_re "${FAILED}")
if(NOT all MATCHES "\\[FAIL\\] ${failed_re}")
  message(FATAL_ERROR "mutant ${MUTANT}: the battery failed (exit ${rc}) but "
                      "not in ${FAILED}")
endif()
if(NOT "${EXPECT}" STREQUAL "" AND NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "mutant ${MUTANT}: ${FAILED} failed without naming the "
                      "broken rule (no match for '${EXPECT}')")
endif()
message("mutant ${MUTANT}: caught by ${FAILED}")
