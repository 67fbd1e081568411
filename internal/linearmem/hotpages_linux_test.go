package linearmem

import (
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// The pages a first mapping of an image mapped in its first two calls
// (within the image) are mapped in the next one before anything touches
// them, written pages as private copies, read ones shared with the file,
// and read as the file.
func TestHotPagesPopulateWhatTheFirstInstanceMapped(t *testing.T) {
	const pages, imagePages = 40, 32
	contents, mapFile := imageFile(t, pages)
	mapImage := func() []byte {
		mem := mapFile()
		if !NoFaultAround(mem) {
			t.Skip("this kernel keeps fault-around (userfaultfd refused): which pages a read maps is its choice")
		}
		return mem
	}

	var hot HotPages
	first := mapImage()
	learning := hot.Learn(imagePages * pageSize)
	memory := func() []byte { return first }
	if first[pageSize+5] != contents[pageSize+5] { // a read
		t.Fatal("page 1 does not read as the file")
	}
	first[20*pageSize+9] = 0xee
	first[35*pageSize] = 0xee // past the image: not learned
	learning.Called(memory)
	if hot.learned() != nil {
		t.Fatal("learned after one call, want after two")
	}
	learning.Called(memory)
	taught := flagsOf(t, first[:imagePages*pageSize])
	for p, s := range taught {
		if want := (pageState{p == 1 || p == 20, p == 20}); s != want {
			t.Fatalf("the first mapping's page %d: %+v, want %+v", p, s, want)
		}
	}

	next := mapImage()
	hot.Populate(next)
	got := flagsOf(t, next)
	if !slices.Equal(got[:imagePages], taught) {
		t.Errorf("mapped before any access:\n%v\nwant the first mapping's:\n%v", got[:imagePages], taught)
	}
	if got[35].present {
		t.Error("page 35, past the image, was populated")
	}
	if string(next) != string(contents) {
		t.Error("the populated mapping does not read as the file")
	}
	if hot.Learn(imagePages*pageSize).hot != nil {
		t.Error("an instance made once the pages were learned was asked to teach")
	}
}

// An instance that waits after one call (an existing actor woken by one
// request, resident since) does not keep the instances made after it from
// teaching: the first to finish its calls does, and what another learns
// later does not replace it.
func TestHotPagesTheFirstInstanceToFinishTeaches(t *testing.T) {
	const pages = 8
	mem := func() []byte {
		b, err := unix.Mmap(-1, 0, pages*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(b) })
		return b
	}
	var hot HotPages
	waiting, waitingMem := hot.Learn(pages*pageSize), mem()
	waitingMem[pageSize] = 1
	waiting.Called(func() []byte { return waitingMem })

	next, nextMem := hot.Learn(pages*pageSize), mem()
	if next.hot == nil {
		t.Fatal("an instance made while the first waited was not asked to teach")
	}
	nextMem[3*pageSize] = 1
	next.Called(func() []byte { return nextMem })
	next.Called(func() []byte { return nextMem })
	want := []pageRun{{3, 4, true}}
	if runs := hot.learned(); !slices.Equal(runs, want) {
		t.Fatalf("learned %v, want %v (the instance that finished its calls)", runs, want)
	}
	waiting.Called(func() []byte { return waitingMem })
	waiting.Finish(func() []byte { return waitingMem })
	if runs := hot.learned(); !slices.Equal(runs, want) {
		t.Errorf("after the waiting instance's calls, learned %v, want %v still", runs, want)
	}

	// Two finishing at once: the one that sets the pages first keeps them.
	var both HotPages
	a, b := both.Learn(pages*pageSize), both.Learn(pages*pageSize)
	aMem, bMem := mem(), mem()
	aMem[pageSize], bMem[2*pageSize] = 1, 1
	a.Called(func() []byte { return aMem })
	b.Called(func() []byte { return bMem })
	a.Finish(func() []byte {
		b.Finish(func() []byte { return bMem }) // b sets its pages while a reads its own
		return aMem
	})
	if runs, want := both.learned(), []pageRun{{2, 3, true}}; !slices.Equal(runs, want) {
		t.Errorf("two instances finishing at once learned %v, want %v (the first to set them)", runs, want)
	}
}

// An instance that closes with nothing mapped (its memory already gone)
// teaches nothing, and the next instance teaches instead.
func TestHotPagesNextInstanceTeachesWhenNothingWasLearned(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 4*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	var hot HotPages
	first := hot.Learn(len(mem))
	first.Finish(func() []byte { return mem }) // nothing touched
	next := hot.Learn(len(mem))
	if next.hot == nil {
		t.Fatal("after a first instance that learned nothing, the next was not asked to teach")
	}
	mem[pageSize] = 1
	next.Finish(func() []byte { return mem })
	if runs := hot.learned(); !slices.Equal(runs, []pageRun{{1, 2, true}}) {
		t.Errorf("learned %v, want page 1 written", runs)
	}
}

type pageState struct{ present, written bool }

// flagsOf reads whether each page of mem is mapped, and whether as a
// private copy (not the file's page).
func flagsOf(t *testing.T, mem []byte) []pageState {
	t.Helper()
	entries, err := pageFlags(mem)
	if err != nil {
		t.Fatal(err)
	}
	s := make([]pageState, len(entries))
	for i, e := range entries {
		s[i] = pageState{e&pagePresent != 0, e&pagePresent != 0 && e&pageFile == 0}
	}
	return s
}

// No more than maxHotPages are learned, the first ones.
func TestHotPagesLearnAtMostMaxPages(t *testing.T) {
	const pages = maxHotPages + 50
	mem, err := unix.Mmap(-1, 0, pages*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	mem[pageSize] = 1
	for p := 10; p < pages; p++ {
		mem[p*pageSize] = 1
	}
	var hot HotPages
	l := hot.Learn(len(mem))
	l.Finish(func() []byte { return mem })
	want := []pageRun{{1, 2, true}, {10, 10 + maxHotPages - 1, true}}
	if runs := hot.learned(); !slices.Equal(runs, want) {
		t.Errorf("learned %v, want %v", runs, want)
	}
}

// An instance that gives up teaching (its memory gone) leaves it to the
// next one.
func TestHotPagesAbandonedLearningPassesToTheNextInstance(t *testing.T) {
	var hot HotPages
	first := hot.Learn(pageSize)
	first.Abandon()
	if hot.Learn(pageSize).hot == nil {
		t.Error("after the teaching instance gave up, the next was not asked to teach")
	}
	if hot.learned() != nil {
		t.Error("an abandoned learning learned pages")
	}
}

// The page an image's last bytes share with what follows them is one of
// its pages: learned as the others are (a C guest's image ends within its
// third page, where its data and the start of its heap are written).
func TestHotPagesLearnTheImagesLastPage(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 4*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	var hot HotPages
	learning := hot.Learn(2*pageSize + 100)
	mem[pageSize] = 1
	mem[2*pageSize+200] = 1 // past the image's end, within its last page
	mem[3*pageSize] = 1     // past the image's last page: not learned
	learning.Finish(func() []byte { return mem })
	if runs, want := hot.learned(), []pageRun{{1, 3, true}}; !slices.Equal(runs, want) {
		t.Errorf("learned %v, want %v", runs, want)
	}
}
