package command

import (
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// limits maps the node's settings of limits and timings to node.Options;
// a zero setting stays zero, which the node reads as its default.
func limits(ns config.Node) node.Options {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	return node.Options{
		IdleTimeout:   ns.IdleTimeout,
		CPUBudget:     ms(ns.CPUBudgetMS),
		HostCPUBudget: ms(ns.HostCPUMS),
		MaxInstances:  ns.MaxInstances,
		GuestLogRate:  guestLogRate(ns.GuestLogRate),
		NoPreinit:     ns.Preinit == "off",

		QueueLimit:      ns.MaxQueuedEvents,
		MaxBodyBytes:    ns.MaxBodyBytes,
		MaxHeaderFields: ns.MaxHeaderFields,
		MaxHeaderBytes:  ns.MaxHeaderBytes,
		WallClock:       ns.WallClock,
		MemoryLimit:     uint32(ns.MemoryLimitMiB) << 20, // at most 4095 MiB (config.Node.Check)
		Storage: storage.Options{
			MaxDatabaseBytes: ns.SQLMaxDatabaseBytes,
			MaxValueBytes:    ns.SQLMaxValueBytes,
			MaxResultBytes:   ns.SQLMaxResultBytes,
			SQLCPUPerEvent:   ms(ns.SQLCPUBudgetMS),
		},
		WebSocketsPerActor:  ns.WebSocketsPerActor,
		WebSocketsPerNode:   ns.WebSocketsPerNode,
		WebSocketMaxMessage: ns.WebSocketMaxMessage,
		WebSocketQueue:      ns.WebSocketQueueMessages,
		WebSocketQueueBytes: ns.WebSocketQueueBytes,
		WebSocketPingAfter:  ns.WebSocketPingAfter,
		WebSocketPongWait:   ns.WebSocketPongWait,
		MaxFetches:          ns.MaxFetches,
		FetchStep:           ns.FetchStepTimeout,
		FetchMaxStep:        ns.FetchMaxStepTimeout,
		FetchMaxBodyBytes:   ns.FetchMaxBodyBytes,
	}
}
