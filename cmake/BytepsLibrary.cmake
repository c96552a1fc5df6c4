# One library per layer, and each layer exports only its public headers.
#
#   byteps_add_library(<name> LAYER <folder in src/> SOURCES <.cc...> [PUBLIC_HEADERS <.h...>]
#                      [DEPENDS <targets...>] [PRIVATE_DEPENDS <targets...>])
#   byteps_add_executable(<name> LAYER <folder in src/> SOURCES <.cc...> [PRIVATE_DEPENDS ...])
#
# Headers keep their "#include "<folder>/file.h"" spelling everywhere; what that spelling reaches
# depends on who asks. Each target gets two include trees in the build tree:
#   ${CMAKE_BINARY_DIR}/include/<name>/public/<folder>/<file.h>  a link to each PUBLIC_HEADERS file
#   ${CMAKE_BINARY_DIR}/include/<name>/internal/<folder>         a link to src/<folder> itself
# The library's own sources see the internal tree (all of its headers); targets that link it see
# only the public tree (PUBLIC, so it travels down the DEPENDS chain: a layer may include the
# public headers of every layer below it, never a header of a layer it does not link, nor a private
# one). A public header may include only public headers (its dependents could not compile it
# otherwise). Tests that exercise internals link <name>_internal, an interface target that adds
# the internal tree. DEPENDS are linked PUBLIC, PRIVATE_DEPENDS (third-party, implementation only)
# PRIVATE. docs/architecture.md's layer table is what tests/check_layers.py holds src/ to.

# Creates (or refreshes) the include trees of `name` and returns their roots.
function(_byteps_include_trees name layer public_headers out_public out_internal)
  set(src_dir ${PROJECT_SOURCE_DIR}/src/${layer})
  set(public_root ${CMAKE_BINARY_DIR}/include/${name}/public)
  set(internal_root ${CMAKE_BINARY_DIR}/include/${name}/internal)
  # Links left from an earlier configure (a header made private, renamed or deleted) go. Only the
  # links are removed (file(REMOVE) unlinks; nothing under src/ is touched).
  if(EXISTS ${public_root})
    file(GLOB_RECURSE stale LIST_DIRECTORIES false ${public_root}/*)
    if(stale)
      file(REMOVE ${stale})
    endif()
  endif()
  foreach(h IN LISTS public_headers)
    if(NOT EXISTS ${src_dir}/${h})
      message(FATAL_ERROR "${name}: public header src/${layer}/${h} does not exist")
    endif()
    get_filename_component(dir ${public_root}/${layer}/${h} DIRECTORY)
    file(MAKE_DIRECTORY ${dir})
    file(CREATE_LINK ${src_dir}/${h} ${public_root}/${layer}/${h} SYMBOLIC)
  endforeach()
  file(MAKE_DIRECTORY ${public_root} ${internal_root})
  if(IS_SYMLINK ${internal_root}/${layer})
    file(REMOVE ${internal_root}/${layer})
  endif()
  file(CREATE_LINK ${src_dir} ${internal_root}/${layer} SYMBOLIC)
  set(${out_public} ${public_root} PARENT_SCOPE)
  set(${out_internal} ${internal_root} PARENT_SCOPE)
endfunction()

function(byteps_add_library name)
  cmake_parse_arguments(ARG "" "LAYER" "SOURCES;PUBLIC_HEADERS;DEPENDS;PRIVATE_DEPENDS" ${ARGN})
  _byteps_include_trees(${name} ${ARG_LAYER} "${ARG_PUBLIC_HEADERS}" public_root internal_root)
  add_library(${name} STATIC ${ARG_SOURCES})
  # The internal tree first: the library's own sources find its headers there.
  target_include_directories(${name} BEFORE PRIVATE ${internal_root})
  target_include_directories(${name} PUBLIC ${public_root})
  target_link_libraries(${name} PUBLIC ${ARG_DEPENDS} PRIVATE ${ARG_PRIVATE_DEPENDS})
  add_library(${name}_internal INTERFACE)
  target_include_directories(${name}_internal INTERFACE ${internal_root})
  target_link_libraries(${name}_internal INTERFACE ${name})
endfunction()

function(byteps_add_executable name)
  cmake_parse_arguments(ARG "" "LAYER" "SOURCES;PRIVATE_DEPENDS" ${ARGN})
  _byteps_include_trees(${name} ${ARG_LAYER} "" public_root internal_root)
  add_executable(${name} ${ARG_SOURCES})
  target_include_directories(${name} BEFORE PRIVATE ${internal_root})
  target_link_libraries(${name} PRIVATE ${ARG_PRIVATE_DEPENDS})
endfunction()
