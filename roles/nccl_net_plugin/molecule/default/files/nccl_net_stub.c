/*
 * A stand-in NCCL net plugin for the molecule scenario: a real ELF shared object, built on the
 * node with Debian's gcc, that exports the symbol NCCL looks up in a net plugin
 * (ncclNetPlugin_v6, whose first member is the plugin's name). No transport is behind it:
 * every function pointer is NULL, so it proves where the library lands and that the dynamic
 * loader finds it, not that NCCL could use it.
 */
struct stub_net { const char *name; void *functions[16]; };

__attribute__((visibility("default")))
const struct stub_net ncclNetPlugin_v6 = { "gpucluster-molecule-stub", { 0 } };
