package linearmem

import (
	"log/slog"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/internal/populate"
)

// Linux maps up to 64 KiB of page-cache pages around each read fault in a
// file mapping ("fault-around"): one read of an instance's memory image puts
// 16 pages in its page tables, and RSS counts each of them once per
// instance, though the page cache holds them once (bench/README.md, "Issue
// 30: memory per Go actor", ADR 1059). The only switch per mapping is
// userfaultfd: the kernel maps no neighbours in a range registered for
// write-protect faults. Registered with asynchronous write-protection
// (Linux 6.7), a write-protect fault is resolved in the kernel, with no
// handler; and nothing is ever write-protected, so a write copies the page
// as before. One descriptor serves the process and stays open: closing it
// would drop the registrations.
var faultAround struct {
	once   sync.Once
	fd     int // -1 where the kernel refuses
	logged sync.Once
}

// From linux/userfaultfd.h.
const (
	uffdUserModeOnly       = 1 // userfaultfd(2) flag: no kernel-mode faults, allowed unprivileged
	uffdAPI                = 0xaa
	uffdFeatureWPAsync     = 1 << 15
	uffdRegisterModeWP     = 1 << 1
	uffdioAPI              = 0xc018aa3f // _IOWR(0xaa, 0x3f, struct uffdio_api)
	uffdioRegister         = 0xc020aa00 // _IOWR(0xaa, 0x00, struct uffdio_register)
	uffdioRegisterIoctlBit = 1 << 0x00  // _UFFDIO_REGISTER in uffdio_api.ioctls
)

type uffdioAPIArg struct{ api, features, ioctls uint64 }

type uffdioRegisterArg struct{ start, len, mode, ioctls uint64 }

// NoFaultAround asks the kernel to map only the pages of mem (its whole
// pages) that are read, and reports whether it took it; where it does not
// (before Linux 6.7, or userfaultfd(2) forbidden), mem keeps the default,
// said once in the log. mem must be a private mapping that nothing
// else registers with userfaultfd; unmapping it ends the registration.
func NoFaultAround(mem []byte) bool {
	faultAround.once.Do(openFaultAround)
	b := populate.WholePages(mem)
	if faultAround.fd < 0 || len(b) == 0 {
		return false
	}
	reg := uffdioRegisterArg{start: uint64(uintptr(unsafe.Pointer(&b[0]))), len: uint64(len(b)), mode: uffdRegisterModeWP}
	if err := uffdIoctl(faultAround.fd, uffdioRegister, unsafe.Pointer(&reg)); err != nil {
		faultAroundKept(err)
		return false
	}
	return true
}

func openFaultAround() {
	faultAround.fd = -1
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK|uffdUserModeOnly, 0, 0)
	if errno != 0 {
		faultAroundKept(errno)
		return
	}
	api := uffdioAPIArg{api: uffdAPI, features: uffdFeatureWPAsync}
	err := uffdIoctl(int(fd), uffdioAPI, unsafe.Pointer(&api))
	if err == nil && api.ioctls&uffdioRegisterIoctlBit == 0 {
		err = unix.ENOTSUP
	}
	if err != nil {
		unix.Close(int(fd))
		faultAroundKept(err)
		return
	}
	faultAround.fd = int(fd)
}

// faultAroundKept says once that the kernel refused, at info: an operator
// reading RSS per actor (about 2.5x higher then, ADR 1059) can tell why,
// for example under a container's seccomp profile.
func faultAroundKept(err error) {
	faultAround.logged.Do(func() {
		slog.Info("memory images keep the kernel's fault-around: RSS counts up to 16 shared pages per page a guest reads (ADR 1059)", "error", err)
	})
}

func uffdIoctl(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}
