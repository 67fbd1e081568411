package nodelease

import (
	"testing"
	"time"
)

// A lease frees its process's actors when live with another instance, or
// fenced or released once ttl + grace passed since its written_at.
func TestLeaseFrees(t *testing.T) {
	s := DefaultSettings()
	at := time.Unix(1000, 0)
	for _, c := range []struct {
		o    Object
		now  time.Time
		want bool
	}{
		{Object{State: Live, Instance: "i", WrittenAt: at}, at.Add(time.Hour), false},
		{Object{State: Live, Instance: "j", WrittenAt: at}, at, true},
		{Object{State: Fenced, Instance: "i", WrittenAt: at}, at.Add(15*time.Second - 1), false},
		{Object{State: Fenced, Instance: "i", WrittenAt: at}, at.Add(15 * time.Second), true},
		{Object{State: Released, Instance: "i", WrittenAt: at}, at.Add(16 * time.Second), true},
	} {
		if got := c.o.Frees("i", c.now, s); got != c.want {
			t.Errorf("%+v at +%v: Frees = %v, want %v", c.o, c.now.Sub(at), got, c.want)
		}
	}
}
