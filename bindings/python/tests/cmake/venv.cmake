# The python_venv fixture: a venv at VENV with REQUIREMENTS installed,
# made by PYTHON. A stamp in the venv records the requirements' hash and
# the interpreter; while both are the same the venv is reused as it is.
# Run with -DPYTHON=... -DVENV=... -DREQUIREMENTS=... -P venv.cmake
foreach(v PYTHON VENV REQUIREMENTS)
  if(NOT ${v})
    message(FATAL_ERROR "venv.cmake: -D${v}=... is required")
  endif()
endforeach()

execute_process(COMMAND ${PYTHON} -c "import sys; print(sys.version.split()[0], sys.executable)"
                OUTPUT_VARIABLE _py OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "cannot run ${PYTHON}")
endif()
file(SHA256 ${REQUIREMENTS} _req)
set(_want "requirements ${_req}\npython ${_py}\n")
set(_stamp ${VENV}/dpl-requirements.stamp)
if(EXISTS ${_stamp} AND EXISTS ${VENV}/bin/python)
  file(READ ${_stamp} _have)
  if(_have STREQUAL _want)
    message(STATUS "reusing ${VENV} (same requirements and python ${_py})")
    return()
  endif()
endif()

message(STATUS "making ${VENV} with python ${_py}")
file(REMOVE_RECURSE ${VENV})
execute_process(COMMAND ${PYTHON} -m venv ${VENV} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "${PYTHON} -m venv ${VENV} failed (${rc}); on Debian: apt-get install python3-venv")
endif()
string(TIMESTAMP _t0 "%s")
execute_process(COMMAND ${VENV}/bin/python -m pip install --progress-bar off -r ${REQUIREMENTS}
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "pip install -r ${REQUIREMENTS} into ${VENV} failed (${rc})")
endif()
execute_process(COMMAND ${VENV}/bin/python -c "import torch, numpy, pytest; print('torch', torch.__version__, 'numpy', numpy.__version__, 'pytest', pytest.__version__)"
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the requirements do not import in ${VENV}")
endif()
string(TIMESTAMP _t1 "%s")
math(EXPR _s "${_t1} - ${_t0}")
file(WRITE ${_stamp} "${_want}")
message(STATUS "made ${VENV}: pip install took ${_s} s")
