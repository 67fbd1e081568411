package main

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// TestNewActorRunsNoHostStatements: a new actor's first request on a
// database its open created (storage.Created, ADR 1069) runs one host
// statement, the record of its on-init. The control, the same plugin with
// Created hidden, makes the host's tables again and reads their rows. In
// both, the on-init recorded stays recorded: a new instance of the actor
// (its first one stopped by the CPU budget) does not run it again.
func TestNewActorRunsNoHostStatements(t *testing.T) {
	for _, tc := range []struct {
		name        string
		created     bool
		exec, query int64
	}{
		{"created", true, 1, 0},
		{"control", false, 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counts := &countingStorage{sayCreated: tc.created}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			n := serveNodeWith(t, "", l, node.Options{Classes: map[string]string{"probe": probe(t)}}, func(st storage.Driver) storage.Driver {
				counts.Driver = st
				return counts
			})
			n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
			if exec, query := counts.exec.Load(), counts.query.Load(); exec != tc.exec || query != tc.query {
				t.Errorf("the first request ran %d host statements and %d host queries; want %d and %d", exec, query, tc.exec, tc.query)
			}
			n.expect("GET", "/actor/probe/a/spin", "", 500, "actor exceeded its CPU budget\n")
			n.expect("GET", "/actor/probe/a/init-runs", "", 200, "1")
		})
	}
}

// countingStorage counts the host statements run on the databases it
// opens, and says whether Open created one only if sayCreated.
type countingStorage struct {
	storage.Driver
	sayCreated  bool
	exec, query atomic.Int64
}

func (s *countingStorage) Open(ctx context.Context, root string, addr abi.Address, opts storage.Options) (storage.DB, error) {
	db, err := s.Driver.Open(ctx, root, addr, opts)
	if err != nil {
		return nil, err
	}
	counted := &countingDB{DB: db, s: s}
	if s.sayCreated {
		return createdDB{counted}, nil
	}
	return counted, nil
}

type countingDB struct {
	storage.DB
	s *countingStorage
}

func (d *countingDB) HostExec(ctx context.Context, sql string, params ...abi.Value) (int64, error) {
	d.s.exec.Add(1)
	return d.DB.HostExec(ctx, sql, params...)
}

func (d *countingDB) HostQuery(ctx context.Context, sql string, params []abi.Value, w *abi.RowsWriter) error {
	d.s.query.Add(1)
	return d.DB.HostQuery(ctx, sql, params, w)
}

type createdDB struct{ *countingDB }

func (d createdDB) Created() bool { return storage.CreatedByOpen(d.DB) }

// TestDeleteSelfDurableInOnInit: an on-init that deletes its actor with
// delete-self-durable and succeeds leaves no database to record the
// on-init in; the request is answered, and the next one starts a new
// actor, whose on-init runs again.
func TestDeleteSelfDurableInOnInit(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{
		"probe": buildGuest(t, "cmd/wasmkeep/testdata/guests/probe", "-X main.deleteInInit=durable"),
	}})
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
}
