package wasmbin

import "fmt"

// Header opens every binary module: the magic number, then version 1.
var Header = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// Section ids.
const (
	CustomSection    = 0
	TypeSection      = 1
	ImportSection    = 2
	FunctionSection  = 3
	TableSection     = 4
	MemorySection    = 5
	GlobalSection    = 6
	ExportSection    = 7
	StartSection     = 8
	ElementSection   = 9
	CodeSection      = 10
	DataSection      = 11
	DataCountSection = 12
	TagSection       = 13
)

var sectionNames = [...]string{"custom", "type", "import", "function", "table", "memory", "global",
	"export", "start", "element", "code", "data", "data count", "tag"}

// SectionName names section id for messages: "code section", or "section
// 42" for an id it does not know.
func SectionName(id byte) string {
	if int(id) < len(sectionNames) {
		return sectionNames[id] + " section"
	}
	return fmt.Sprintf("section %d", id)
}

// HasSection reports whether a binary module has a section id, reading
// section headers up to the first it cannot read.
func HasSection(wasm []byte, id byte) bool {
	if len(wasm) < len(Header) {
		return false
	}
	r := Reader{Rest: wasm[len(Header):]}
	for !r.Done() {
		got := r.Byte()
		r.Bytes(r.U32())
		if r.Err == nil && got == id {
			return true
		}
	}
	return false
}
