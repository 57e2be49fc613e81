# Functions that declare dpl's libraries the same way everywhere: the
# satellites of the core (sim, plan, bootstrap, json, mpi), the transport
# and device modules, and the reference models.
#
# Each library gets: a target dpl_<id> with alias dpl::<id>, output name
# libdpl-<id with '-'>, include directory (build and install), version,
# install + export in dplTargets, its headers installed, a pkg-config file
# dpl-<id>.pc (Requires: dpl plus the given pkg-config modules), and a
# static twin dpl_<id>_testlib over the core's dpl_testlib with the same
# sources, for white-box tests.

set(DPL_MODULE_PC_IN ${CMAKE_CURRENT_LIST_DIR}/dpl-module.pc.in)

# dpl_add_library(ID id SOURCES ... [HEADERS ...] [INCLUDE dir]
#                 [PUBLIC_LIBS ...] [LIBS ...] [TEST_LIBS ...]
#                 [PC_REQUIRES "pkg ..."] [PC_LIBS "-lfoo"] [DESCRIPTION "..."]
#                 [PC_CFLAGS "-I..."] [EXPORT_SET set] [DEFINES ...]
#                 [NO_TESTLIB])
#  EXPORT_SET: the install export it joins (default dplTargets); a
#    library with dependencies a consumer must find (dpl::mpi) gets its
#    own, loaded by dplConfig.cmake only when that component is wanted.
#  PUBLIC_LIBS: dpl targets this library's users also need (dpl_sim ...);
#    their _testlib twins are linked by the testlib.
#  LIBS: private dependencies (PkgConfig::UCX, m ...), also linked by the
#    testlib.
#  PC_CFLAGS: compiler flags the library's headers need beyond its own
#    include directory (a toolkit's, for one without a .pc file).
#  NO_TESTLIB: no static twin (a library whose tests need none, and whose
#    sources are slow to compile twice, CUDA's).
function(dpl_add_library)
  cmake_parse_arguments(L "NO_TESTLIB" "ID;INCLUDE;DESCRIPTION;PC_REQUIRES;PC_LIBS;PC_CFLAGS;EXPORT_SET"
                        "SOURCES;HEADERS;PUBLIC_LIBS;LIBS;TEST_LIBS;DEFINES" ${ARGN})
  string(REPLACE "_" "-" _out "dpl-${L_ID}")
  set(_t dpl_${L_ID})
  if(NOT L_INCLUDE)
    set(L_INCLUDE ${CMAKE_CURRENT_SOURCE_DIR}/include)
  endif()
  if(NOT L_DESCRIPTION)
    set(L_DESCRIPTION "dpl ${L_ID}")
  endif()
  add_library(${_t} ${L_SOURCES})
  add_library(dpl::${L_ID} ALIAS ${_t})
  target_include_directories(${_t} PUBLIC
    $<BUILD_INTERFACE:${L_INCLUDE}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${_t} PUBLIC dpl ${L_PUBLIC_LIBS}
    PRIVATE ${L_LIBS} $<BUILD_INTERFACE:dpl_warnings>)
  if(L_DEFINES)
    target_compile_definitions(${_t} PRIVATE ${L_DEFINES})
  endif()
  set_target_properties(${_t} PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION 0
    EXPORT_NAME ${L_ID} OUTPUT_NAME ${_out})
  if(NOT L_EXPORT_SET)
    set(L_EXPORT_SET dplTargets)
  endif()
  install(TARGETS ${_t} EXPORT ${L_EXPORT_SET}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  if(L_HEADERS)
    install(FILES ${L_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dpl)
  endif()
  # pkg-config: Requires the core and the dpl libraries it builds on.
  set(PC_NAME ${_out})
  set(PC_DESCRIPTION "${L_DESCRIPTION}")
  set(PC_LIB ${_out})
  set(PC_REQUIRES "dpl")
  foreach(dep ${L_PUBLIC_LIBS})
    if(dep MATCHES "^dpl_(.*)$")
      string(REPLACE "_" "-" _dep "dpl-${CMAKE_MATCH_1}")
      string(APPEND PC_REQUIRES " ${_dep}")
    endif()
  endforeach()
  set(PC_REQUIRES_PRIVATE "${L_PC_REQUIRES}")
  set(PC_LIBS_PRIVATE "${L_PC_LIBS}")
  set(PC_CFLAGS "${L_PC_CFLAGS}")
  configure_file(${DPL_MODULE_PC_IN} ${CMAKE_BINARY_DIR}/pkgconfig/${_out}.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/pkgconfig/${_out}.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
  set_property(GLOBAL APPEND PROPERTY DPL_COMPONENTS ${L_ID})
  if(L_NO_TESTLIB)
    return()
  endif()
  # The static twin for white-box tests.
  set(_tl)
  foreach(dep ${L_PUBLIC_LIBS})
    if(dep MATCHES "^dpl_")
      list(APPEND _tl ${dep}_testlib)
    else()
      list(APPEND _tl ${dep})
    endif()
  endforeach()
  add_library(${_t}_testlib STATIC ${L_SOURCES})
  target_include_directories(${_t}_testlib PUBLIC ${L_INCLUDE})
  target_link_libraries(${_t}_testlib PUBLIC dpl_testlib ${_tl} ${L_LIBS} ${L_TEST_LIBS}
    PRIVATE $<BUILD_INTERFACE:dpl_warnings>)
  if(L_DEFINES)
    target_compile_definitions(${_t}_testlib PRIVATE ${L_DEFINES})
  endif()
endfunction()

# dpl_add_transport(NAME x SOURCES ... HEADER include/dpl/transport_x.h
#                   [LIBS ...] [PC_REQUIRES "pkgs"])
# Target dpl_transport_x (alias dpl::transport_x, libdpl-transport-x,
# dpl-transport-x.pc), exporting the table dpl_transport_x; the shared
# build also defines the plugin entry point (DPL_TRANSPORT_PLUGIN).
function(dpl_add_transport)
  cmake_parse_arguments(M "" "NAME;HEADER;PC_REQUIRES" "SOURCES;LIBS;PUBLIC_LIBS" ${ARGN})
  dpl_add_library(ID transport_${M_NAME} SOURCES ${M_SOURCES}
    HEADERS ${M_HEADER} LIBS ${M_LIBS} PUBLIC_LIBS dpl_backend ${M_PUBLIC_LIBS}
    PC_REQUIRES "${M_PC_REQUIRES}"
    DESCRIPTION "dpl transport ${M_NAME} (dpl_transport_${M_NAME})")
  get_target_property(_type dpl_transport_${M_NAME} TYPE)
  if(_type STREQUAL "SHARED_LIBRARY")
    target_compile_definitions(dpl_transport_${M_NAME} PRIVATE DPL_BUILDING_PLUGIN=1)
  endif()
endfunction()

# dpl_add_device(NAME x SOURCES ... HEADER include/dpl/device_x.h
#                [LIBS ...] [PUBLIC_LIBS ...] [PC_REQUIRES "pkgs"]
#                [PC_LIBS "-lfoo"] [PC_CFLAGS "-I..."] [NO_TESTLIB])
# Target dpl_device_x (alias dpl::device_x, libdpl-device-x,
# dpl-device-x.pc), exporting the table dpl_device_x.
function(dpl_add_device)
  cmake_parse_arguments(M "NO_TESTLIB" "NAME;HEADER;PC_REQUIRES;PC_LIBS;PC_CFLAGS"
                        "SOURCES;LIBS;PUBLIC_LIBS" ${ARGN})
  set(_nt)
  if(M_NO_TESTLIB)
    set(_nt NO_TESTLIB)
  endif()
  dpl_add_library(ID device_${M_NAME} SOURCES ${M_SOURCES}
    HEADERS ${M_HEADER} LIBS ${M_LIBS} PUBLIC_LIBS dpl_backend ${M_PUBLIC_LIBS}
    PC_REQUIRES "${M_PC_REQUIRES}" PC_LIBS "${M_PC_LIBS}"
    PC_CFLAGS "${M_PC_CFLAGS}" ${_nt}
    DESCRIPTION "dpl device ${M_NAME} (dpl_device_${M_NAME})")
endfunction()
