# SPDX-License-Identifier: MIT
# Runs at install time (`cmake --install`, and so cpack): writes the systemd
# unit for the prefix being installed into, then installs it, the sysusers
# file and the configs.  At configure time the prefix may still change
# (`cmake --install --prefix P`), so a unit configured then could name a
# binary that is not there.
#
# Set by daemon/CMakeLists.txt: SHMT_SRC, SHMT_BIN, SHMT_SBINDIR,
# SHMT_SYSCONFDIR, SHMT_UNITDIR (the cache override, may be empty),
# SHMT_PC_PREFIX, SHMT_PC_UNITDIR, SHMT_PC_SYSUSERSDIR (from systemd.pc,
# may be empty).
set(prefix "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "(.)/+$" "\\1" prefix "${prefix}")

if(IS_ABSOLUTE "${SHMT_SBINDIR}")
  set(sbindir "${SHMT_SBINDIR}")
else()
  set(sbindir "${prefix}/${SHMT_SBINDIR}")
endif()

# GNUInstallDirs' rule for sysconfdir: /etc for the system's own prefix.
if(IS_ABSOLUTE "${SHMT_SYSCONFDIR}")
  set(sysconfdir "${SHMT_SYSCONFDIR}")
elseif(prefix STREQUAL "/usr")
  set(sysconfdir "/etc")
elseif(prefix MATCHES "^/opt/")
  set(sysconfdir "/etc${prefix}")
else()
  set(sysconfdir "${prefix}/${SHMT_SYSCONFDIR}")
endif()

# systemd's own directories when installing into systemd's prefix (a
# package), else under the prefix: /usr/local/lib/systemd/system is on
# systemd's search path, and a private prefix stays self-contained.
if(SHMT_UNITDIR)
  set(unitdir "${SHMT_UNITDIR}")
elseif(SHMT_PC_UNITDIR AND prefix STREQUAL SHMT_PC_PREFIX)
  set(unitdir "${SHMT_PC_UNITDIR}")
else()
  set(unitdir "${prefix}/lib/systemd/system")
endif()
if(SHMT_PC_SYSUSERSDIR AND prefix STREQUAL SHMT_PC_PREFIX)
  set(sysusersdir "${SHMT_PC_SYSUSERSDIR}")
else()
  set(sysusersdir "${prefix}/lib/sysusers.d")
endif()

set(SHMT_UNIT_SBINDIR "${sbindir}")
set(SHMT_UNIT_SYSCONFDIR "${sysconfdir}")
# One file per destination: installs into other prefixes may run at once
# (cpack beside `cmake --install`), each with its own unit.
string(MD5 tag "$ENV{DESTDIR}|${prefix}")
configure_file("${SHMT_SRC}/shmthrottled.service.in"
  "${SHMT_BIN}/unit-${tag}/shmthrottled.service" @ONLY)
file(INSTALL DESTINATION "${unitdir}" TYPE FILE
  FILES "${SHMT_BIN}/unit-${tag}/shmthrottled.service")
file(INSTALL DESTINATION "${sysusersdir}" TYPE FILE
  RENAME shmthrottle.conf FILES "${SHMT_SRC}/shmthrottle.sysusers")
file(INSTALL DESTINATION "${sysconfdir}/shmthrottle" TYPE FILE
  FILES "${SHMT_SRC}/shmthrottled.conf.example")
# An edited config is never overwritten by a later install.
if(EXISTS "$ENV{DESTDIR}${sysconfdir}/shmthrottle/shmthrottled.conf")
  message(STATUS "Keeping: $ENV{DESTDIR}${sysconfdir}/shmthrottle/shmthrottled.conf")
else()
  file(INSTALL DESTINATION "${sysconfdir}/shmthrottle" TYPE FILE
    FILES "${SHMT_SRC}/shmthrottled.conf")
endif()
