package command

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/secrets"
	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// serve --app reads the app's secrets from the bucket (ADR 1050; the
// book's ADR 0016, "Nodes"): opened before the node serves, then followed
// by a follower of their own, apart from the deploy follower.

// secretsKeys loads the key files of --secrets-key (node.secrets_key),
// refusing them with --no-secrets or without a bucket.
func secretsKeys(files listSetting, noSecrets, bucket bool) ([]secrets.Key, error) {
	switch {
	case len(files.values) > 0 && noSecrets:
		return nil, fmt.Errorf("%s and --no-secrets (node.no_secrets) together: give one", files.name)
	case len(files.values) > 0 && !bucket:
		return nil, fmt.Errorf("%s needs a bucket (--bucket): the app's secrets are in it", files.name)
	}
	keys, err := loadKeys(files.values)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", files.name, err)
	}
	return keys, nil
}

// nodeSecrets tells the node what the app's secrets follower found; until
// the node exists, its options.
type nodeSecrets struct {
	*secrets.Follower
	node *node.Node // set before Run
}

// followSecrets opens the app's secrets into opts (or sets the node to
// start failed closed) and returns their follower. A node without a key
// refuses to start once the app has secrets: current found, whatever
// else failed (the object missing, current corrupt).
func followSecrets(ctx context.Context, c *clusterNode, a app.Name, keys []secrets.Key, period time.Duration, opts *node.Options, log *slog.Logger) (*nodeSecrets, error) {
	s := &nodeSecrets{}
	s.Follower = secrets.NewFollower(secrets.FollowerConfig{
		Bucket: c.bucket, Place: secrets.Place{Prefix: c.prefix, App: a}, Keys: keys, Period: period,
		Opened: func(cur secrets.Current) {
			values := byClass(cur.Set)
			if s.node == nil {
				opts.Secrets = values
			} else {
				s.node.SetSecrets(values)
			}
			log.Info("the app's secrets opened", "seq", cur.Seq, "names", cur.Set.Len(), "key", cur.KeyID)
		},
		Blocked: func(err error) {
			if s.node == nil {
				opts.SecretsBlocked = err
			} else {
				s.node.BlockSecrets(err)
			}
		},
	})
	s.Start(ctx)
	if len(keys) == 0 && secrets.FoundCurrent(opts.SecretsBlocked) {
		return nil, fmt.Errorf("app %s has secrets in the bucket: give this node their key (--secrets-key FILE), or --no-secrets to run it without them, with --env only", a)
	}
	return s, nil
}

// byClass is a set's values as the node takes them: by class, name to
// value.
func byClass(s secrets.Set) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, n := range s.Names() {
		if out[n.Class] == nil {
			out[n.Class] = s.Values(n.Class)
		}
	}
	return out
}
