"""lockstep's version, in one place: the installed library's file name (liblockstep.so.VERSION) and
soname (liblockstep.so.MAJOR), lockstepConfigVersion.cmake and lockstep.pc all read it."""

VERSION = "0.1.0"
SOVERSION = VERSION.split(".")[0]
