// Package app names an app (book ADR 0021): tenant/app, the unit of
// deploy, version, rollback and secrets, and the owner of its actors'
// state. The bucket keys of an app are under two roots (ADR 1045):
// DeployRoot for its versions, StateRoot for its actors' state.
package app

import (
	"fmt"
	"regexp"
	"strings"
)

// identRE is the grammar of tenant and app names, the grammar of classes.
var identRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,63}$`)

// Name is tenant/app.
type Name struct {
	Tenant string
	App    string
}

// Default is the implicit app of serve --actor and dev.
var Default = Name{Tenant: "default", App: "default"}

// Parse reads tenant/app and checks both names against the grammar,
// naming the rule in its error.
func Parse(s string) (Name, error) {
	t, a, ok := strings.Cut(s, "/")
	if !ok {
		return Name{}, fmt.Errorf("app %q: write it tenant/app, for example acme/shop", s)
	}
	n := Name{Tenant: t, App: a}
	return n, n.Check()
}

// Check reports a name outside the grammar [a-z][a-z0-9-]{0,63}, naming
// which part breaks it.
func (n Name) Check() error {
	if !identRE.MatchString(n.Tenant) {
		return fmt.Errorf("app %s: tenant %q must match [a-z][a-z0-9-]{0,63}", n, n.Tenant)
	}
	if !identRE.MatchString(n.App) {
		return fmt.Errorf("app %s: app name %q must match [a-z][a-z0-9-]{0,63}", n, n.App)
	}
	return nil
}

func (n Name) String() string { return n.Tenant + "/" + n.App }

// StateRoot is where the app's actor state lives in the bucket (history,
// ownership records, and later the alarm index and moves), and under the
// data directory on disk: state/<tenant>/<app>/.
func (n Name) StateRoot() string { return StatePrefix + n.Tenant + "/" + n.App + "/" }

// StatePrefix is where every app's state root is.
const StatePrefix = "state/"

// DeployRoot is where the app's deployed versions and its current pointer
// live: apps/<tenant>/<app>/.
func (n Name) DeployRoot() string { return DeployPrefix + n.Tenant + "/" + n.App + "/" }

// SecretsRoot is where the app's sealed secrets and their current
// pointer live (ADR 1050), beside its versions: apps/<tenant>/<app>/secrets/.
// A version id is 16 hex digits, so never SecretsDir.
func (n Name) SecretsRoot() string { return n.DeployRoot() + SecretsDir + "/" }

// SecretsDir is the directory of a deploy root that holds secrets, not a
// version.
const SecretsDir = "secrets"

// DeployPrefix is where every app's deploy root is.
const DeployPrefix = "apps/"
