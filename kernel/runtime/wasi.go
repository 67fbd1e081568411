package runtime

import "time"

// Monotonic is what the WASI monotonic clock reads in every engine: the
// realtime clock's nanoseconds at the process's start plus the time elapsed
// since, by the system's monotonic clock. Within a process it never goes
// back; a later process starts it higher unless the system's clock was set
// back meanwhile, so readings a pre-initialised module recorded in an earlier
// process (ADR 1040) stay in its past, where a clock counting from the
// system's boot or the instance's creation would put them in the future.
func Monotonic() int64 { return processEpoch + int64(time.Since(processStart)) }

var (
	processStart = time.Now()
	processEpoch = processStart.UnixNano()
)

// WASIModule is the import module name of WASI preview 1.
const WASIModule = "wasi_snapshot_preview1"

// WASIPreview1 is every function of WASI preview 1 with its signature, as
// the specification's witx files define them (pointers, sizes, descriptors
// and flags are i32; timestamps, file sizes, offsets, rights and directory
// cookies are i64). Every engine provides them all with exactly these
// signatures (conformance/runtimetest checks it), and the kernel refuses at
// load a module that imports one with any other.
var WASIPreview1 = map[string]Signature{
	"args_get":                wasiSig("ii"),
	"args_sizes_get":          wasiSig("ii"),
	"environ_get":             wasiSig("ii"),
	"environ_sizes_get":       wasiSig("ii"),
	"clock_res_get":           wasiSig("ii"),
	"clock_time_get":          wasiSig("iIi"),
	"fd_advise":               wasiSig("iIIi"),
	"fd_allocate":             wasiSig("iII"),
	"fd_close":                wasiSig("i"),
	"fd_datasync":             wasiSig("i"),
	"fd_fdstat_get":           wasiSig("ii"),
	"fd_fdstat_set_flags":     wasiSig("ii"),
	"fd_fdstat_set_rights":    wasiSig("iII"),
	"fd_filestat_get":         wasiSig("ii"),
	"fd_filestat_set_size":    wasiSig("iI"),
	"fd_filestat_set_times":   wasiSig("iIIi"),
	"fd_pread":                wasiSig("iiiIi"),
	"fd_prestat_get":          wasiSig("ii"),
	"fd_prestat_dir_name":     wasiSig("iii"),
	"fd_pwrite":               wasiSig("iiiIi"),
	"fd_read":                 wasiSig("iiii"),
	"fd_readdir":              wasiSig("iiiIi"),
	"fd_renumber":             wasiSig("ii"),
	"fd_seek":                 wasiSig("iIii"),
	"fd_sync":                 wasiSig("i"),
	"fd_tell":                 wasiSig("ii"),
	"fd_write":                wasiSig("iiii"),
	"path_create_directory":   wasiSig("iii"),
	"path_filestat_get":       wasiSig("iiiii"),
	"path_filestat_set_times": wasiSig("iiiiIIi"),
	"path_link":               wasiSig("iiiiiii"),
	"path_open":               wasiSig("iiiiiIIii"),
	"path_readlink":           wasiSig("iiiiii"),
	"path_remove_directory":   wasiSig("iii"),
	"path_rename":             wasiSig("iiiiii"),
	"path_symlink":            wasiSig("iiiii"),
	"path_unlink_file":        wasiSig("iii"),
	"poll_oneoff":             wasiSig("iiii"),
	"proc_exit":               {Params: []ValueType{I32}}, // returns nothing: it does not return
	"proc_raise":              wasiSig("i"),
	"sched_yield":             wasiSig(""),
	"random_get":              wasiSig("ii"),
	"sock_accept":             wasiSig("iii"),
	"sock_recv":               wasiSig("iiiiii"),
	"sock_send":               wasiSig("iiiii"),
	"sock_shutdown":           wasiSig("ii"),
}

// wasiSig is a WASI function's signature: params spelled i (i32) and I
// (i64), and one i32 result, the errno.
func wasiSig(params string) Signature {
	s := Signature{Results: []ValueType{I32}}
	for _, c := range params {
		t := I32
		if c == 'I' {
			t = I64
		}
		s.Params = append(s.Params, t)
	}
	return s
}
