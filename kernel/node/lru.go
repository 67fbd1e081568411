package node

import "container/heap"

// The least recently active actor (book, "The guest sandbox", Memory): an
// admission at max_instances evicts the idle actor whose last event ended
// longest ago. Scanning every registered actor for it, under the node's
// lock, cost an admission time linear in the resident actors. The actors
// are kept in a heap instead, ordered by lastActive as it was when each was
// placed (lruAt), so that an event, which sets lastActive, never takes the
// lock: the heap is corrected lazily, when an actor whose time has moved
// reaches its top, and what leastRecent finds is the actor a scan would
// have found (while lastActive only grows: a wall clock stepped back can
// make them differ, each by the times it saw).

// lruHeap is the registered actors (Node.actors), under the node's lock.
type lruHeap []*actor

func (h lruHeap) Len() int           { return len(h) }
func (h lruHeap) Less(i, j int) bool { return h[i].lruAt < h[j].lruAt }
func (h lruHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].lruIndex, h[j].lruIndex = i, j
}

func (h *lruHeap) Push(x any) {
	a := x.(*actor)
	a.lruIndex = len(*h)
	*h = append(*h, a)
}

func (h *lruHeap) Pop() any {
	old := *h
	a := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return a
}

// register adds a to the actors; the node's lock is held.
func (n *Node) register(a *actor) {
	n.actors[a.key] = a
	a.lruAt = a.lastActive.Load()
	heap.Push(&n.lru, a)
}

// unregister removes a from the actors; the node's lock is held.
func (n *Node) unregister(a *actor) {
	delete(n.actors, a.key)
	heap.Remove(&n.lru, a.lruIndex)
}

// passLimit is how many busy or claimed actors leastRecent takes off the
// heap's top before it scans instead: when the least recently active
// actors are all busy (a node at max_instances under load), taking each
// off and back would cost more than the scan.
const passLimit = 64

// leastRecent returns the least recently active idle actor that no
// admission claimed, or nil; the node's lock is held. Every other such
// actor's lastActive is at least its lruAt, which is at least that of the
// one returned, whose lruAt is its lastActive now.
func (n *Node) leastRecent() *actor {
	var passed []*actor // busy or claimed: put back once one is found
	defer func() {
		for _, a := range passed {
			heap.Push(&n.lru, a)
		}
	}()
	for len(n.lru) > 0 {
		a := n.lru[0]
		if at := a.lastActive.Load(); at != a.lruAt {
			a.lruAt = at
			heap.Fix(&n.lru, 0)
			continue
		}
		if a.evictable() {
			return a
		}
		if len(passed) == passLimit {
			return n.scanLeastRecent()
		}
		passed = append(passed, heap.Pop(&n.lru).(*actor))
	}
	return nil
}

// evictable reports whether an admission may evict a: it is idle and no
// other admission claimed it. The node's lock is held.
func (a *actor) evictable() bool { return a.claim == nil && a.idle() }

// scanLeastRecent is leastRecent's choice by a scan of every actor.
func (n *Node) scanLeastRecent() *actor {
	var lru *actor
	for _, a := range n.actors {
		if a.evictable() && (lru == nil || a.lastActive.Load() < lru.lastActive.Load()) {
			lru = a
		}
	}
	return lru
}
