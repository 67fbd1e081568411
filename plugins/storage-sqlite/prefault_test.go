package sqlitestorage

import (
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
	"modernc.org/libc"
)

// TestPrefault: the region a connection's next large allocation gets from
// modernc's allocator is resident after prefault, though its pages had been
// handed back to the kernel. It fails if the allocator stops handing out
// the regions freed last first, or in other than 64 KiB regions, which
// the lever rests on.
func TestPrefault(t *testing.T) {
	tls := libc.NewTLS()
	defer tls.Close()
	p := libc.Xmalloc(tls, allocatorRegion/2)
	if p == 0 {
		t.Fatal("out of memory")
	}
	// Hand back all but the first page, the region's header, as the
	// allocator does with regions it keeps beyond what it keeps resident.
	region, osPage := p&^(allocatorRegion-1), uintptr(unix.Getpagesize())
	if err := unix.Madvise(cbytes(region+osPage, warmBytes-int(osPage)), unix.MADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	libc.Xfree(tls, p)
	if n := residentPages(t, region, warmBytes); n > 1 {
		t.Fatalf("%d pages still resident after MADV_DONTNEED", n)
	}
	prefault(tls)
	q := libc.Xmalloc(tls, allocatorRegion/2)
	defer libc.Xfree(tls, q)
	if q&^(allocatorRegion-1) != region {
		t.Fatalf("the allocator handed out region %#x, not %#x, the one freed last", q&^(allocatorRegion-1), region)
	}
	if n := residentPages(t, region, warmBytes); n != warmBytes/unix.Getpagesize() {
		t.Fatalf("%d of the region's first %d pages are resident", n, warmBytes/unix.Getpagesize())
	}
}

// residentPages counts the resident pages among the n bytes at start, a
// page boundary.
func residentPages(t *testing.T, start uintptr, n int) int {
	vec := make([]byte, (n+unix.Getpagesize()-1)/unix.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, start, uintptr(n), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	resident := 0
	for _, v := range vec {
		resident += int(v & 1)
	}
	return resident
}

// TestConnectionsCounted: each binding counts a connection from its open
// to its close, and not one that failed to open. The warm-ups run only at
// a new peak of the count, so a close not counted would stop them for
// good, and an open not counted would run them at every open.
func TestConnectionsCounted(t *testing.T) {
	for name, b := range bindings {
		before := connections.open.Load()
		c, err := b.open(filepath.Join(t.TempDir(), "db"))
		if err != nil {
			t.Fatal(err)
		}
		if n := connections.open.Load(); n != before+1 {
			t.Errorf("%s: %d connections counted with one more open, want %d", name, n, before+1)
		}
		if err := c.close(); err != nil {
			t.Fatal(err)
		}
		if _, err := b.open(filepath.Join(t.TempDir(), "absent", "db")); err == nil {
			t.Fatalf("%s: a database opened in a directory that does not exist", name)
		}
		if n := connections.open.Load(); n != before {
			t.Errorf("%s: %d connections counted after a close and a failed open, want %d", name, n, before)
		}
	}
}
