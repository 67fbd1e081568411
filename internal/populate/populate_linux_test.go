package populate

import (
	"encoding/binary"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Pages maps every whole page of a buffer, and no page outside it.
func TestPagesMapsTheBuffersPages(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 8*PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if got := present(t, mem); got != "........" {
		t.Fatalf("a new mapping has pages %s mapped, want none", got)
	}
	Pages(mem[PageSize-1 : 6*PageSize+1]) // pages 1 to 5 whole, 0 and 6 in part
	if got, want := present(t, mem), ".#####.."; got != want {
		t.Errorf("mapped %s, want %s", got, want)
	}
	for i, b := range mem {
		if b != 0 {
			t.Fatalf("byte %d is %d after populating, want 0", i, b)
		}
	}
}

// Read accesses every whole page of a buffer, and no page outside it: a
// read of an anonymous page not yet mapped maps one (the zero page).
func TestReadAccessesTheBuffersPages(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 8*PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	Read(mem[PageSize-1 : 6*PageSize+1])
	if got, want := present(t, mem), ".#####.."; got != want {
		t.Errorf("mapped %s, want %s", got, want)
	}
}

// ReadFile reads what os.ReadFile reads: empty, small, large files, and a
// file whose size the system does not know in advance.
func TestReadFileReadsTheFile(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 511, 512, 513, minBytes - 1, minBytes, 3<<20 + 7} {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(i * 31)
		}
		path := dir + "/f"
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(path)
		if err != nil || string(got) != string(b) {
			t.Fatalf("%d bytes: read %d bytes, %v; want the file", size, len(got), err)
		}
	}
	want, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile("/proc/self/status")
	if err != nil || len(got) < len(want)/2 || string(got[:5]) != string(want[:5]) {
		t.Errorf("/proc/self/status: read %q, %v", got, err)
	}
	if _, err := ReadFile(dir + "/missing"); !os.IsNotExist(err) {
		t.Errorf("a missing file: %v, want not exist", err)
	}
}

// present draws which pages of mem the process maps: # mapped, . not.
func present(t *testing.T, mem []byte) string {
	t.Helper()
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries := make([]byte, 8*(len(mem)/PageSize))
	if _, err := f.ReadAt(entries, int64(uintptr(unsafe.Pointer(&mem[0]))/uintptr(PageSize)*8)); err != nil {
		t.Fatal(err)
	}
	s := ""
	for i := 0; i < len(entries); i += 8 {
		if binary.LittleEndian.Uint64(entries[i:])&(1<<63) != 0 {
			s += "#"
		} else {
			s += "."
		}
	}
	return s
}
