package command

import (
	"syscall"
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
		MinFreeDisk:   minFreeDisk(ns.MinFreeDiskBytes, ns.DataDir),
		GuestLogRate:  guestLogRate(ns.GuestLogRate),
		FailoverWait:  optionalSecs(ns.FailoverWaitSecs, node.NoFailoverWait),
		AlarmSweep:    optionalSecs(ns.AlarmSweepSecs, node.NoAlarmSweep),
		NoPreinit:     ns.Preinit == "off",

		QueueLimit:      ns.MaxQueuedEvents,
		MaxBodyBytes:    ns.MaxBodyBytes,
		BodyTimeout:     ns.RequestBodyTimeout,
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

// optionalSecs maps a node setting in seconds whose default the node
// derives (node.failover_wait_secs, node.alarm_sweep_secs) to
// node.Options: unset is 0, the node's default, and 0 is off, the
// option's own value for off (node.NoFailoverWait, node.NoAlarmSweep).
func optionalSecs(secs *int, off time.Duration) time.Duration {
	switch {
	case secs == nil:
		return 0
	case *secs == 0:
		return off
	}
	return time.Duration(*secs) * time.Second
}

// Open files the fit keeps for everything else (the cache, logs, outbound
// connections, the bucket's), the cluster listener's connections (a share
// kept, not a cap: serve's cluster listener is not wrapped), and
// the files of each resident actor (its database and WAL: SQLite's
// descriptors, and the storage plugin's own, the database's lock, ADR 1062,
// and the WAL it syncs). Every connection is a file too.
const (
	reservedFiles      = 256
	clusterConnections = 1024
	filesPerActor      = 4
	openFilesUnlimited = 1 << 30
)

// fitted is what serve runs with once the open-files limit is counted.
type fitted struct {
	cluster, connections, instances int
	lowered                         bool // connections or instances are fewer than asked
}

// fitOpenFiles sizes the listeners' connection caps and the resident
// actors to a limit of files (the book: the cluster listener's share
// first, then the connections and the actors; each at least 1). When the
// asked connections and actors do not fit, connections take at least half
// of what is left (what the actors leave, if more) and the actors the rest.
func fitOpenFiles(files uint64, cluster bool, connections, instances int) fitted {
	usable := int(min(files, openFilesUnlimited)) - reservedFiles
	f := fitted{connections: connections, instances: instances}
	if cluster {
		f.cluster = max(1, min(clusterConnections, usable/8))
		usable -= f.cluster
	}
	if connections+filesPerActor*instances <= usable {
		return f
	}
	f.lowered = true
	f.connections = max(1, min(connections, max(usable/2, usable-filesPerActor*instances)))
	f.instances = max(1, min(instances, (usable-f.connections)/filesPerActor))
	return f
}

// openFiles is this process's limit of open files. Go raised its soft limit
// to the hard one at start (package os, since Go 1.19), as far as it may.
func openFiles() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	return l.Cur, nil
}

// minFreeDisk is the free space below which the node is not ready: the
// setting, or 5% of a disk smaller than 20 times it (the book: 1 GiB, or
// 5% of a smaller disk); the setting as it is when the disk cannot be
// read.
func minFreeDisk(setting int64, dataDir string) int64 {
	if setting <= 0 {
		return setting
	}
	_, size, err := node.DiskSpace(dataDir)
	if err != nil {
		return setting
	}
	return min(setting, int64(size/20))
}
