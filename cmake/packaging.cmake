# SPDX-License-Identifier: MIT
# Debian packages from one build: `cpack -G DEB` in the build directory
# writes
#   libshmthrottle0     the shared library (component runtime)
#   libshmthrottle-dev  header, static library, .so link, pkg-config and
#                       CMake files, section 3 manuals (component dev)
#   shmthrottle         shmthrottled, the CLI, the systemd unit, the
#                       sysusers file, the configs, manuals 1, 5 and 8
#                       (component tools)
#   python3-shmthrottle the Python module for Debian's python3, when the
#                       binding is built (component python)
# The demo (component demo) is left out.  Packages install into /usr
# whatever the build's CMAKE_INSTALL_PREFIX: cpack runs the install with
# DESTDIR set and the prefix /usr, so the install-time script that writes
# the unit (daemon/install_files.cmake) sees /usr and names
# /usr/sbin/shmthrottled, with its config in /etc.
set(SHMT_PACKAGE_MAINTAINER "libshmthrottle maintainers <root@localhost>"
  CACHE STRING "The Maintainer field of the Debian packages")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME shmthrottle)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_SET_DESTDIR ON)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev tools)
if(TARGET shmthrottle_python)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${SHMT_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libshmthrottle0)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
  "shared-memory rate limiters, dictionary and hot-key analyzer (library)
 libshmthrottle keeps rate limiters, a string dictionary with a hot-key
 analyzer and windowed counters in one POSIX shared-memory segment that
 the worker processes of a host map and use without a server.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libshmthrottle-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEV_DEPENDS runtime)
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "shared-memory rate limiters (development files)
 The header, the static library, pkg-config and CMake package files and
 the section 3 manuals of libshmthrottle.")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME shmthrottle)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION admin)
set(CPACK_COMPONENT_TOOLS_DESCRIPTION
  "shared-memory rate limiters: daemon and command-line tool
 shmthrottled creates the segment, keeps it tidy and snapshots it, and
 serves metrics for Prometheus; shmthrottle shows and operates it.  The
 systemd unit runs the daemon as user shmthrottle; workers join the group
 shmthrottle to use the segment.")
set(CPACK_DEBIAN_TOOLS_PACKAGE_CONTROL_EXTRA
  ${CMAKE_CURRENT_LIST_DIR}/deb/conffiles
  ${CMAKE_CURRENT_LIST_DIR}/deb/postinst
  ${CMAKE_CURRENT_LIST_DIR}/deb/prerm)

if(TARGET shmthrottle_python)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-shmthrottle)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
  # A C extension is built for one minor version of the interpreter.
  math(EXPR _shmt_py_next "${SHMT_PY_MINOR} + 1")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
    "python3 (>= ${SHMT_PY_MAJOR}.${SHMT_PY_MINOR}), python3 (<< ${SHMT_PY_MAJOR}.${_shmt_py_next})")
  set(CPACK_COMPONENT_PYTHON_DESCRIPTION
    "shared-memory rate limiters (Python 3 module)
 import shmthrottle: limiters, the dictionary, counters and hot keys of a
 libshmthrottle segment from Python, with WSGI and ASGI middleware that
 answer 429 with Retry-After.  The library is linked into the module.")
endif()

include(CPack)
