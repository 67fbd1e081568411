package linearmem

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Resident pages holding zeros go back to the system and read as zeros;
// others stay.
func TestReleaseZeroPages(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 16*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	for _, p := range []int{1, 5, 9} {
		mem[p*pageSize+7] = byte(p)
	}
	for _, p := range []int{0, 2, 3, 4, 8} { // zeroed, as the Go runtime does
		clear(mem[p*pageSize : (p+1)*pageSize])
	}
	// From inside page 0: it is left alone.
	if freed := ReleaseZeroPages(mem[100:]); freed != 4*pageSize {
		t.Errorf("freed %d bytes, want %d (pages 2, 3, 4 and 8)", freed, 4*pageSize)
	}
	resident := make([]byte, 16)
	if err := mincore(mem, resident); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[int]bool{0: true, 1: true, 2: false, 3: false, 4: false, 5: true, 8: false, 9: true} {
		if got := resident[p]&1 != 0; got != want {
			t.Errorf("page %d resident: %v, want %v", p, got, want)
		}
	}
	for i, b := range mem {
		want := byte(0)
		if i%pageSize == 7 && (i/pageSize == 1 || i/pageSize == 5 || i/pageSize == 9) {
			want = byte(i / pageSize)
		}
		if b != want {
			t.Fatalf("byte %d (page %d) is %d, want %d", i, i/pageSize, b, want)
		}
	}
}

// Pages mapped from a file and only read are unmapped and read the same
// afterwards; written pages stay, with what was written.
func TestReleaseSharedPages(t *testing.T) {
	const pages = 16
	contents, mapImage := imageFile(t, pages)
	mem := mapImage()
	for _, p := range []int{0, 1, 3, 6, 10} {
		if mem[p*pageSize+5] != contents[p*pageSize+5] {
			t.Fatalf("page %d does not read as the file", p)
		}
	}
	for _, p := range []int{2, 7} {
		mem[p*pageSize+9] = 0xee
	}
	before := mapped(t, mem)
	for _, p := range []int{0, 1, 2, 3, 6, 7, 10} {
		if !before[p] {
			t.Fatalf("page %d, touched, is not mapped", p)
		}
	}
	// From inside page 0: it is left alone.
	freed := ReleaseSharedPages(mem[100:])
	after := mapped(t, mem)
	want, unmapped := 0, 0
	for p := range pages {
		switch {
		case p == 0 || p == 2 || p == 7:
			if !after[p] {
				t.Errorf("page %d (outside, or written) was unmapped", p)
			}
		case after[p]:
			t.Errorf("page %d, only read, is still mapped", p)
		}
		if before[p] && !after[p] {
			unmapped++
		}
		if before[p] && p != 0 && p != 2 && p != 7 {
			want++ // fault-around may have mapped more than the pages read
		}
	}
	if freed != want*pageSize || unmapped != want {
		t.Errorf("freed %d bytes, unmapped %d pages; want %d pages", freed, unmapped, want)
	}
	for i, b := range mem {
		want := contents[i]
		if i%pageSize == 9 && (i/pageSize == 2 || i/pageSize == 7) {
			want = 0xee
		}
		if b != want {
			t.Fatalf("byte %d (page %d) is %#x, want %#x", i, i/pageSize, b, want)
		}
	}
}

// mapped reports which pages of mem are mapped in this process. mincore
// cannot say: for a file mapping it reports the page cache.
func mapped(t *testing.T, mem []byte) []bool {
	t.Helper()
	entries, err := pageFlags(mem)
	if err != nil {
		t.Fatal(err)
	}
	m := make([]bool, len(entries))
	for i, e := range entries {
		m[i] = e&pagePresent != 0
	}
	return m
}

// imageFile writes a file of pages pages whose bytes differ from page to
// page, and returns its contents and a function that maps it privately,
// read-write, until the test ends.
func imageFile(t *testing.T, pages int) (contents []byte, mapImage func() []byte) {
	t.Helper()
	contents = make([]byte, pages*pageSize)
	for i := range contents {
		contents[i] = byte(i*7 + i/pageSize)
	}
	path := filepath.Join(t.TempDir(), "image")
	if err := os.WriteFile(path, contents, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return contents, func() []byte {
		mem, err := unix.Mmap(int(f.Fd()), 0, pages*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(mem) })
		return mem
	}
}
