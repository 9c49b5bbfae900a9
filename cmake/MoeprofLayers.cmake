# Layering that the build enforces (docs/architecture.md).
#
# Every moeprof library exposes exactly one include root, made in the build tree, that holds a
# link to its own folder and nothing else: ${CMAKE_BINARY_DIR}/include/<target>/<name> -> <dir>.
# A target sees only the roots of what it links, so `#include "executor/backend.h"` in a target
# that does not link moeprof_executor fails to compile. scripts/check_includes.py checks the same
# edges textually (relative includes, forbidden folders) and runs in CI.

# moeprof_expose(<target> <name> <dir> [INTERFACE])
#   <name>: the include prefix (e.g. "planner", "kernels/common"); <dir>: the folder it names.
function(moeprof_expose target name dir)
  set(root ${CMAKE_BINARY_DIR}/include/${target})
  get_filename_component(parent ${root}/${name} DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  if(IS_SYMLINK ${root}/${name})
    file(REMOVE ${root}/${name})
  endif()
  file(CREATE_LINK ${dir} ${root}/${name} SYMBOLIC)
  if("INTERFACE" IN_LIST ARGN)
    target_include_directories(${target} INTERFACE ${root})
  else()
    target_include_directories(${target} PUBLIC ${root})
  endif()
endfunction()
