package placement

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

type fixed struct {
	owner Owner
	err   error
}

func (f fixed) Place(context.Context, abi.Address) (Owner, error) { return f.owner, f.err }

// Check runs an event here only on Here; another owner and an error each
// say why not, and NotHere tells both from other errors, wrapped or not.
func TestCheck(t *testing.T) {
	addr := abi.Address{Tenant: "t", Class: "room", Name: "a/b"}
	if err := Check(context.Background(), Local{}, addr); err != nil {
		t.Fatalf("Local: %v", err)
	}
	err := Check(context.Background(), fixed{owner: Owner{Node: "n2", Addr: "127.0.0.2:7070"}}, addr)
	var e *Elsewhere
	if !errors.As(err, &e) || e.Owner.Node != "n2" || !strings.Contains(err.Error(), "room/a%2Fb is held by node n2; retry") {
		t.Errorf("another owner: %v", err)
	}
	down := errors.New("no quorum")
	err = Check(context.Background(), fixed{err: down}, addr)
	var u *Unplaced
	if !errors.As(err, &u) || !errors.Is(err, down) {
		t.Errorf("an error: %v", err)
	}
	for _, err := range []error{&Elsewhere{}, fmt.Errorf("call: %w", &Unplaced{down})} {
		if !NotHere(err) {
			t.Errorf("NotHere(%v) = false", err)
		}
	}
	if NotHere(down) || NotHere(nil) {
		t.Error("NotHere holds of an error that is not about placement")
	}
}
