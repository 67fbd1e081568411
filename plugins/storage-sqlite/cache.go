package sqlitestorage

// entry is a prepared statement and what the database learned about it when
// it was compiled.
type entry struct {
	sql      string
	s        stmt
	kind     txKind
	readonly bool // changes nothing (transaction control counts as read-only)
	dml      bool // inserts, updates or deletes rows, so it has a row count
	params   int
	names    []string // column names, refreshed by columnNames

	prev, next *entry
}

// columnNames returns the statement's column names, reusing the previous
// call's strings while they still match (a schema change can alter them).
func (e *entry) columnNames() []string {
	n := e.s.columns()
	if len(e.names) != n {
		e.names = make([]string, n)
	}
	for i := range e.names {
		if b := e.s.columnName(i); e.names[i] != string(b) {
			e.names[i] = string(b)
		}
	}
	return e.names
}

// stmtCache keeps the most recently used prepared statements, keyed by their
// SQL text exactly as given.
type stmtCache struct {
	max  int
	m    map[string]*entry
	ring entry // sentinel: ring.next is the most recently used
}

func newStmtCache(max int) *stmtCache {
	// Not sized for max: a node keeps two caches per resident actor, and
	// most actors use a few statements.
	c := &stmtCache{max: max, m: map[string]*entry{}}
	c.ring.next, c.ring.prev = &c.ring, &c.ring
	return c
}

func (c *stmtCache) get(sql string) *entry {
	e := c.m[sql]
	if e != nil && c.ring.next != e {
		c.unlink(e)
		c.pushFront(e)
	}
	return e
}

// put adds e, which must not be cached yet, and returns the entry it pushed
// out, if any, for the caller to finalize.
func (c *stmtCache) put(e *entry) (evicted *entry) {
	if len(c.m) >= c.max {
		evicted = c.ring.prev
		c.unlink(evicted)
		delete(c.m, evicted.sql)
	}
	c.m[e.sql] = e
	c.pushFront(e)
	return evicted
}

// finalizeAll empties the cache, finalizing every statement.
func (c *stmtCache) finalizeAll() {
	for e := c.ring.next; e != &c.ring; e = e.next {
		e.s.finalize()
	}
	clear(c.m)
	c.ring.next, c.ring.prev = &c.ring, &c.ring
}

func (c *stmtCache) unlink(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (c *stmtCache) pushFront(e *entry) {
	e.prev, e.next = &c.ring, c.ring.next
	c.ring.next.prev = e
	c.ring.next = e
}
