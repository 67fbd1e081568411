package replication

import (
	"math/rand/v2"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/memdb"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// The fakes are memdb's: databases whose pages are in memory, with a log
// of committed transactions the way the SQLite plugin's WAL holds them
// (captured from a position, folded into the file only by a checkpoint
// with nothing uncaptured, captured again from the start after a reopen).

const pageSize = memdb.PageSize

type (
	fakeDriver = memdb.Driver
	fakeDB     = memdb.DB
)

func newDriver() *fakeDriver { return memdb.New() }

// randomTxn commits a transaction of random pages, the database growing
// now and then (every new page written, as SQLite does).
func randomTxn(db *fakeDB, rng *rand.Rand) {
	size := uint32(len(db.Pages()))
	next := size
	if size == 0 || rng.IntN(4) == 0 {
		next += uint32(1 + rng.IntN(3))
	}
	pages := map[uint32][]byte{}
	for p := size + 1; p <= next; p++ {
		pages[p] = randomPage(rng)
	}
	for range 1 + rng.IntN(3) {
		pages[uint32(1+rng.IntN(int(next)))] = randomPage(rng)
	}
	db.Commit(next, pages) //nolint:errcheck // an open database takes it
}

func randomPage(rng *rand.Rand) []byte {
	p := make([]byte, pageSize)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return p
}

func storageOpts() storage.Options { return storage.Options{Replication: true} }
