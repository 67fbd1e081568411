package wasmtimeruntime

// contract is the runtime contract version this plugin is built against, in
// builds with cgo and without (where the plugin lists itself as
// unavailable). Change it only when the plugin is brought up to a new
// version of kernel/runtime: the kernel refuses a plugin whose version is
// not its own (ADR 1002).
const contract = "runtime/v2"
