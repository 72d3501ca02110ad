// The translation unit of a precompiled-header owner (cmake/PrecompiledHeaders.cmake): the target
// exists to build the precompiled header that others reuse; this unit itself adds nothing.
