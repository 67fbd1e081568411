package wazeroruntime

import (
	"os"
	"sync"

	"github.com/tetratelabs/wazero/experimental"

	"github.com/wasmkeep/wasmkeep/internal/linearmem"
)

// image is a module's initial memory (prepared.image), which every instance
// starts from.
type image struct {
	data []byte
	// file holds data, to be mapped copy-on-write into each instance's
	// memory; nil where that is not available (or once closed), and data is
	// copied instead. mu keeps Close from freeing its descriptor, which
	// another file could then reuse, while an instance maps it.
	mu   sync.RWMutex
	file *os.File
	// hot is the pages a new instance's first events map, learned from the
	// first instance that maps the file to finish its calls, and populated
	// in every later one that does.
	hot linearmem.HotPages
}

// size is how much of the memory the image covers: 0 for none.
func (img *image) size() int {
	if img == nil {
		return 0
	}
	return len(img.data)
}

// hotLearned reports whether the image's hot pages are learned.
func (img *image) hotLearned() bool { return img != nil && img.hot.Learned() }

// hotStale reports whether an instance made when hotLearned was
// learnedWhenMade lacks hot pages one made now would have.
func (img *image) hotStale(learnedWhenMade bool) bool {
	return img != nil && img.hot.Stale(learnedWhenMade)
}

func (img *image) Close() error {
	if img == nil {
		return nil
	}
	img.mu.Lock()
	defer img.mu.Unlock()
	if img.file == nil {
		return nil
	}
	err := img.file.Close()
	img.file = nil
	return err
}

// heapMemory is wazero's default behaviour (a Go slice grown by copying),
// for where mappings are not available.
type heapMemory struct{ buf []byte }

func newHeapMemory(img *image) experimental.LinearMemory {
	m := &heapMemory{}
	if img != nil {
		m.buf = append(make([]byte, 0, len(img.data)), img.data...)
	}
	return m
}

func (m *heapMemory) Reallocate(size uint64) []byte {
	if size > uint64(cap(m.buf)) {
		grown := make([]byte, size, size+size/2)
		copy(grown, m.buf)
		m.buf = grown
	}
	m.buf = m.buf[:size]
	return m.buf
}

func (m *heapMemory) Free() { m.buf = nil }
