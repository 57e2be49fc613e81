# python_pip_install: `pip install PACKAGE` (with build isolation, so the
# build needs PyPI) into a fresh venv at VENV made by PYTHON, then CHECK
# run by that venv's python from WORK_DIR, outside the source tree, with no
# DPL_LIBRARY_PATH or PYTHONPATH: the installed package alone must work.
# Run with -DPYTHON=... -DVENV=... -DPACKAGE=... -DCHECK=... -DWORK_DIR=...
foreach(v PYTHON VENV PACKAGE CHECK WORK_DIR)
  if(NOT ${v})
    message(FATAL_ERROR "pip_install.cmake: -D${v}=... is required")
  endif()
endforeach()
unset(ENV{DPL_LIBRARY_PATH})
unset(ENV{DPL_CLI})
unset(ENV{PYTHONPATH})
unset(ENV{LD_LIBRARY_PATH})

file(REMOVE_RECURSE ${VENV} ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
execute_process(COMMAND ${PYTHON} -m venv ${VENV} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "${PYTHON} -m venv ${VENV} failed (${rc})")
endif()
string(TIMESTAMP _t0 "%s")
execute_process(COMMAND ${VENV}/bin/python -m pip install --progress-bar off ${PACKAGE}
                WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE out)
string(TIMESTAMP _t1 "%s")
math(EXPR _s "${_t1} - ${_t0}")
file(WRITE ${WORK_DIR}/pip-install.log "${out}")
if(rc)
  message(FATAL_ERROR "pip install ${PACKAGE} failed (${rc}) after ${_s} s:\n${out}")
endif()
message(STATUS "pip install ${PACKAGE}: ${_s} s (log: ${WORK_DIR}/pip-install.log)")

# -I: no PYTHONPATH, no user site, not the script's folder on sys.path.
execute_process(COMMAND ${VENV}/bin/python -I ${CHECK}
                WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the installed package failed its check (${rc})")
endif()
