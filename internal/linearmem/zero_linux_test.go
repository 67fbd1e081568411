package linearmem

import (
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
