package linearmem

import (
	"sync"

	"github.com/wasmkeep/wasmkeep/internal/populate"
)

// HotPages is the pages of a memory image that a new instance's first
// events map: those they write (copies of the image's pages, or zeros past
// it) and those they only read (the image's own, shared). It is learned
// once, from the first of its instances to finish its calls, and every
// later instance has them mapped in a few system calls before its guest
// runs rather than by a page fault each at its first access: this VM class
// takes 20 to 36 µs a fault, and the kernel populates a page in one call
// for 2 to 3 (bench/README.md, "Issue 30: a new Go actor"). A page the
// teaching instance did not map still faults as before; one it mapped that
// a later instance would not have costs that instance the page. Only the
// image's pages are learned, and at most maxHotPages of them, so what an
// instance is given up front is bounded however much memory the teaching
// instance's events touched.
//
// Every instance made before the pages are learned teaches, unless a call
// of its fails (Abandon: a failed event's pages are not a new instance's),
// and the first to finish its calls sets them: the first instance made may
// wait long for a second call (a restarted node's first actor is an
// existing one, woken by one request and resident since), and it must not
// keep every later instance from being taught. The teacher is then not
// always a new actor's instance (on-init and a first event): an existing
// actor's two events teach too, which beats learning nothing.
type HotPages struct {
	mu   sync.Mutex
	runs []pageRun // nil until learned
}

// pageRun is pages [first, end) of a memory, populated for writing or for
// reading.
type pageRun struct {
	first, end int
	write      bool
}

// learnAfterCalls is how many calls of a teaching instance its pages are
// learned after, counted from after its start: a new actor's on-init and
// its first event.
const learnAfterCalls = 2

// maxHotPages bounds the pages learned (1 MiB of 4 KiB pages), the first
// ones of the image: a Go actor's first event maps about 60.
const maxHotPages = 256

// Learning is an instance's part in learning its image's hot pages.
type Learning struct {
	hot       *HotPages // nil once it taught or gave up, or for an instance that does not teach
	imageSize int
	calls     int
}

// Learn returns the learning of a new instance whose memory starts with an
// image of imageSize bytes: it teaches unless the pages are learned.
func (h *HotPages) Learn(imageSize int) Learning {
	if h.Learned() {
		return Learning{}
	}
	return Learning{hot: h, imageSize: imageSize}
}

// Called counts a call the instance finished; after learnAfterCalls, the
// pages of mem() (the instance's whole memory) in its image are learned. No guest code
// may run in it meanwhile.
func (l *Learning) Called(mem func() []byte) {
	if l.hot == nil {
		return
	}
	if l.calls++; l.calls == learnAfterCalls {
		l.Finish(mem)
	}
}

// Finish learns the pages of mem() now, if this instance teaches, has not
// yet, and no other instance taught meanwhile: it is closing. When none are
// mapped (nothing touched, or no pagemap to read), it teaches nothing.
func (l *Learning) Finish(mem func() []byte) {
	h := l.hot
	if h == nil {
		return
	}
	l.hot = nil
	if h.Learned() {
		return
	}
	// The image's pages include the one its last bytes share with what
	// follows them (a C guest's data and the start of its heap: a third of
	// a three-page image).
	m := mem()
	imageEnd := (l.imageSize + populate.PageSize - 1) / populate.PageSize * populate.PageSize
	runs := mappedRuns(m[:min(imageEnd, len(m))], maxHotPages)
	h.mu.Lock()
	if h.runs == nil && len(runs) > 0 {
		h.runs = runs
	}
	h.mu.Unlock()
}

// Abandon gives up teaching, if this instance teaches and has not yet: its
// memory is gone (a stopped call closed the instance).
func (l *Learning) Abandon() { l.hot = nil }

// Learned reports whether the pages are learned: an instance made before
// lacks them.
func (h *HotPages) Learned() bool { return h.learned() != nil }

// Stale reports whether an instance made when Learned was learnedWhenMade
// lacks pages an instance made now would have.
func (h *HotPages) Stale(learnedWhenMade bool) bool { return !learnedWhenMade && h.Learned() }

// learned returns the runs learned so far.
func (h *HotPages) learned() []pageRun {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs
}
