package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/deploys"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/secrets"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// secretsRetention is how long a sealed object is kept after it stopped
// being current (the book's ADR 0016: an hour, as deploy versions).
const secretsRetention = time.Hour

// secretsFlags are the flags of the secrets commands; each binds the ones
// it takes.
type secretsFlags struct {
	app             string
	all             bool
	keys            []string
	newKey          string
	class           string
	files           []string
	from            string
	nodesHaveNewKey bool
	force           bool
	cluster         clusterFlags
	lease           nodelease.Settings // the configuration's lease timings, once the bucket is open
}

func (f *secretsFlags) bindApp(fl *pflag.FlagSet) {
	fl.StringVar(&f.app, "app", "", "the app: TENANT/APP")
	f.cluster.bind(fl, false)
}

func (f *secretsFlags) bindKeys(fl *pflag.FlagSet, help string) {
	fl.StringArrayVar(&f.keys, "key", nil, help)
}

// bindForce is for the commands that change values (set, unset, reset).
func (f *secretsFlags) bindForce(fl *pflag.FlagSet) {
	fl.BoolVar(&f.force, "force", false, "change the secrets while a live node of the app does not read them (an older node, or one run without them): it serves the names as unset")
}

func (f *secretsFlags) bindNodesHaveNewKey(fl *pflag.FlagSet) {
	fl.BoolVar(&f.nodesHaveNewKey, "nodes-have-new-key", false, "every node of the app holds the key the change is sealed with (a second --secrets-key): no heartbeat says which keys a node holds")
}

func secretsCommand(reg *plugin.Registry) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secrets",
		Short: "Keep an app's secrets in the bucket, sealed with a key the nodes hold",
		Long: `Keep an app's secrets in the bucket, sealed (ChaCha20-Poly1305) with a
secrets key that the nodes and the machine running these commands hold. A
bucket reader sees neither names nor values. Values come from stdin or a
file, never from the command line, and are never printed or logged. Each
change is one new object and one seq, so nodes never see half of it.`,
	}
	cmd.AddCommand(newKeyCommand(), setCommand(reg), unsetCommand(reg), listSecretsCommand(reg), rotateKeyCommand(reg), resetCommand(reg))
	return cmd
}

func newKeyCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "new-key --out FILE",
		Short: "Write a new secrets key to a new file, mode 0600",
		Long: `Write a new secrets key (32 random bytes, as 64 hex characters) to FILE,
created with mode 0600; an existing file is refused. The key is never
printed: output redirected to a file would be created under the shell's
umask. Its id, which names it in errors, is.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out FILE is required")
			}
			id, err := secrets.NewKeyFile(out)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote secrets key %s to %s (mode 0600): give it to every node (serve --secrets-key) and keep it with the bucket's credentials\n", id, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the file to create")
	return cmd
}

func setCommand(reg *plugin.Registry) *cobra.Command {
	var f secretsFlags
	cmd := &cobra.Command{
		Use:   "set --class CLASS NAME < VALUE | --class CLASS --file NAME=PATH... | --from FILE",
		Short: "Set secrets of an app: one name from stdin, or several at once, as one change",
		Long: `Set secrets of an app as one change (one new seq): NAME's value from
stdin (one trailing newline or CRLF removed), or each --file NAME=PATH's
value from its file (taken as written), or every entry of --from FILE in
the plaintext format ("<class> <name> <length>\n<value>\n" each). Other
names are kept. Given two --key, the change is sealed with the first.`,
		Example: `  wasmkeep secrets set --bucket s3://b/prod --app acme/shop --key secrets.key --class api STRIPE_KEY < stripe.txt
  wasmkeep secrets set --bucket s3://b/prod --app acme/shop --key secrets.key --class api --file TLS_KEY=key.pem --file TLS_CERT=cert.pem`,
		RunE: func(cmd *cobra.Command, args []string) error { return secretsSet(cmd, reg, f, args) },
	}
	fl := cmd.Flags()
	f.bindApp(fl)
	f.bindKeys(fl, "the secrets key FILE (repeatable: during a key change, the change is sealed with the first)")
	fl.StringVar(&f.class, "class", "", "the class the names are for")
	fl.StringArrayVar(&f.files, "file", nil, "NAME=PATH: NAME's value is PATH's content, as written (repeatable; all in one change)")
	fl.StringVar(&f.from, "from", "", "a FILE of entries in the plaintext format, any classes, all in one change")
	f.bindNodesHaveNewKey(fl)
	f.bindForce(fl)
	return cmd
}

func unsetCommand(reg *plugin.Registry) *cobra.Command {
	var f secretsFlags
	cmd := &cobra.Command{
		Use:   "unset --class CLASS NAME...",
		Short: "Remove secrets of an app, several names as one change",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.class == "" {
				return errors.New("--class is required")
			}
			return secretsChange(cmd, reg, f, func(s *secrets.Set) error {
				var missing []string
				for _, n := range args {
					if !s.Delete(f.class, n) {
						missing = append(missing, n)
					}
				}
				if len(missing) > 0 {
					return fmt.Errorf("class %s has no secret named %s: nothing was changed", f.class, strings.Join(missing, ", "))
				}
				return nil
			}, "unset "+f.class+" "+strings.Join(args, " "))
		},
	}
	fl := cmd.Flags()
	f.bindApp(fl)
	f.bindKeys(fl, "the secrets key FILE (repeatable: during a key change, the change is sealed with the first)")
	fl.StringVar(&f.class, "class", "", "the class the names are for")
	f.bindNodesHaveNewKey(fl)
	f.bindForce(fl)
	return cmd
}

func listSecretsCommand(reg *plugin.Registry) *cobra.Command {
	var f secretsFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List an app's secrets: classes and names, never values",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withSecrets(cmd, reg, &f, func(ctx context.Context, b bucket.Bucket, p secrets.Place, keys []secrets.Key) error {
				cur, err := secrets.Read(ctx, b, p, keys)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if cur.Seq == 0 {
					fmt.Fprintf(out, "%s: no secrets\n", p.App)
					return nil
				}
				fmt.Fprintf(out, "%s: seq %d, sealed under key %s, %d names\n", p.App, cur.Seq, cur.KeyID, cur.Set.Len())
				for _, n := range cur.Set.Names() {
					fmt.Fprintf(out, "  %s %s\n", n.Class, n.Name)
				}
				return nil
			})
		},
	}
	f.bindApp(cmd.Flags())
	f.bindKeys(cmd.Flags(), "the secrets key FILE (repeatable: either may open the set)")
	return cmd
}

func rotateKeyCommand(reg *plugin.Registry) *cobra.Command {
	var f secretsFlags
	cmd := &cobra.Command{
		Use:   "rotate-key --key OLD --new-key NEW --nodes-have-new-key (--app TENANT/APP | --all)",
		Short: "Re-seal an app's secrets (or every app's under the prefix) under a new key",
		Long: `Re-seal the current secrets under NEW, as a new seq. First give every
node NEW as well (a second --secrets-key, one node restarted at a time),
then run this with --nodes-have-new-key, which it requires: a node without
NEW cannot open the re-sealed set and answers 503 for the app. Then remove
OLD from the nodes. After a key compromise, change the values too: OLD
still opens the objects it sealed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return rotateKey(cmd, reg, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.app, "app", "", "the app: TENANT/APP")
	fl.BoolVar(&f.all, "all", false, "every app with secrets under the bucket's prefix")
	f.cluster.bind(fl, false)
	f.bindKeys(fl, "the key the secrets are sealed under now, FILE (repeatable)")
	fl.StringVar(&f.newKey, "new-key", "", "the key FILE to seal under")
	f.bindNodesHaveNewKey(fl)
	return cmd
}

func resetCommand(reg *plugin.Registry) *cobra.Command {
	var f secretsFlags
	cmd := &cobra.Command{
		Use:   "reset --new-key NEW --from FILE --nodes-have-new-key --app TENANT/APP",
		Short: "After losing the key: replace an app's secrets with a whole set, without opening the current one",
		Long: `Write a whole set from FILE (the plaintext format: "<class> <name>
<length>\n<value>\n" each) as the next seq, sealed under NEW, without
opening the current set. Give every node NEW first, and say so with
--nodes-have-new-key, which it requires.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case f.newKey == "" || f.from == "":
				return errors.New("--new-key and --from are required")
			case !f.nodesHaveNewKey:
				return errors.New("a reset needs --nodes-have-new-key: give every node the new key first (serve --secrets-key), or it answers 503 for the app")
			}
			set, err := readPlaintextFile(f.from)
			if err != nil {
				return err
			}
			return secretsWrite(cmd, reg, f, secrets.Change{Reset: true, NodesHaveKey: true, Apply: func(s *secrets.Set) error {
				*s = set.Clone()
				return nil
			}}, fmt.Sprintf("reset to %d names from %s", set.Len(), f.from))
		},
	}
	f.bindApp(cmd.Flags())
	cmd.Flags().StringVar(&f.newKey, "new-key", "", "the key FILE to seal under")
	cmd.Flags().StringVar(&f.from, "from", "", "the whole set, a FILE in the plaintext format")
	f.bindNodesHaveNewKey(cmd.Flags())
	f.bindForce(cmd.Flags())
	return cmd
}

// secretsSet reads the values (stdin, --file or --from) before the
// bucket is opened, then writes them as one change.
func secretsSet(cmd *cobra.Command, reg *plugin.Registry, f secretsFlags, args []string) error {
	var given secrets.Set
	for _, a := range args {
		if strings.Contains(a, "=") {
			// The argument is not repeated: it may hold a value.
			return errors.New("a value on the command line would reach shell history and ps: give NAME and the value on stdin, or --file NAME=PATH")
		}
	}
	sources := 0
	for _, source := range []bool{len(args) > 0, len(f.files) > 0, f.from != ""} {
		if source {
			sources++
		}
	}
	switch {
	case sources != 1:
		return errors.New("give one of: --class CLASS NAME (the value on stdin), --class CLASS --file NAME=PATH..., or --from FILE")
	case len(args) > 1:
		return errors.New("one NAME from stdin; for several, use --file NAME=PATH for each, or --from FILE")
	case f.from != "" && f.class != "":
		return errors.New("--from names each entry's class: give it without --class")
	case f.from == "" && f.class == "":
		return errors.New("--class is required")
	}
	switch {
	case f.from != "":
		set, err := readPlaintextFile(f.from)
		if err != nil {
			return err
		}
		given = set
	case len(args) == 1:
		data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), secrets.MaxPlaintext+1))
		if err != nil {
			return fmt.Errorf("reading the value from stdin: %w", err)
		}
		if len(data) > secrets.MaxPlaintext {
			return fmt.Errorf("the value on stdin is over %d bytes", secrets.MaxPlaintext)
		}
		v := string(data)
		if line, ok := strings.CutSuffix(v, "\n"); ok {
			v = strings.TrimSuffix(line, "\r") // exactly one \n or \r\n
		}
		if err := given.Put(f.class, args[0], v); err != nil {
			return err
		}
	default:
		for _, s := range f.files {
			name, path, ok := strings.Cut(s, "=")
			if !ok || name == "" || path == "" {
				return errors.New("--file: want NAME=PATH")
			}
			// The name is quoted only once Put found it a name: a value
			// typed in its place must not be echoed.
			data, err := readBounded(path)
			if err != nil {
				return fmt.Errorf("--file: %w", err)
			}
			if _, twice := given.Value(f.class, name); twice {
				return fmt.Errorf("--file: %s given twice", name)
			}
			if err := given.Put(f.class, name, string(data)); err != nil {
				return fmt.Errorf("--file ...=%s: %w", path, err)
			}
		}
	}
	var names []string
	for _, n := range given.Names() {
		names = append(names, n.String())
	}
	return secretsChange(cmd, reg, f, func(s *secrets.Set) error {
		for _, n := range given.Names() {
			v, _ := given.Value(n.Class, n.Name)
			if err := s.Put(n.Class, n.Name, v); err != nil {
				return err
			}
		}
		return nil
	}, "set "+strings.Join(names, ", "))
}

// readBounded reads a file of at most a set's size.
func readBounded(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, secrets.MaxPlaintext+1))
	if err == nil && len(data) > secrets.MaxPlaintext {
		err = fmt.Errorf("%s is over %d bytes", path, secrets.MaxPlaintext)
	}
	return data, err
}

func readPlaintextFile(path string) (secrets.Set, error) {
	data, err := readBounded(path)
	if err != nil {
		return secrets.Set{}, err
	}
	return secrets.ParsePlaintext(path, data)
}

// secretsChange writes apply as one change sealed with the first --key,
// opening the current set with any of them.
func secretsChange(cmd *cobra.Command, reg *plugin.Registry, f secretsFlags, apply func(*secrets.Set) error, what string) error {
	return secretsWrite(cmd, reg, f, secrets.Change{Apply: apply, NodesHaveKey: f.nodesHaveNewKey}, what)
}

// secretsWrite loads the keys (the seal key is --new-key if given, else
// the first --key), writes c and collects old objects.
func secretsWrite(cmd *cobra.Command, reg *plugin.Registry, f secretsFlags, c secrets.Change, what string) error {
	if f.newKey != "" {
		f.keys = append([]string{f.newKey}, f.keys...)
	}
	return withSecrets(cmd, reg, &f, func(ctx context.Context, b bucket.Bucket, p secrets.Place, keys []secrets.Key) error {
		if err := deploys.RefuseDeleted(ctx, b, p.App); err != nil {
			return err
		}
		if cmd.Flags().Lookup("force") != nil && !f.force {
			if err := refuseSecretsUnread(ctx, b, p.App, f.lease); err != nil {
				return err
			}
		}
		c.Seal, c.Open = keys[0], keys[1:]
		res, err := secrets.Write(ctx, b, p, c)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if res.NoOp {
			fmt.Fprintf(out, "%s: the secrets are unchanged (seq %d): nothing written\n", p.App, res.To)
			return nil
		}
		fmt.Fprintf(out, "%s: secrets seq %d is current, sealed under key %s (was %s): %s\n", p.App, res.To, c.Seal.ID(), orNone(res.From), what)
		warnUnknownClasses(ctx, cmd.ErrOrStderr(), b, p.App, c)
		collectSecrets(ctx, cmd, b, p)
		return nil
	})
}

// refuseSecretsUnread refuses a change while a live node of the app does
// not read secrets, as its heartbeat says (line 11), counted live with the
// lease timings cluster status uses; heartbeats that cannot be read refuse
// it too.
func refuseSecretsUnread(ctx context.Context, b bucket.Bucket, a app.Name, s nodelease.Settings) error {
	ids, err := cluster.SecretsUnread(ctx, b, a, s, time.Now())
	if err != nil {
		return fmt.Errorf("the nodes' heartbeats cannot be read to check that they read secrets (--force changes them anyway): %w", err)
	}
	if len(ids) > 0 {
		return fmt.Errorf("live nodes of %s do not read secrets from the bucket (an older version, or run with --no-secrets): %s; they would serve the names as unset. Upgrade them or run them with --secrets-key, or --force", a, strings.Join(ids, ", "))
	}
	return nil
}

func orNone(seq uint64) string {
	if seq == 0 {
		return "none"
	}
	return fmt.Sprintf("seq %d", seq)
}

// collectSecrets deletes sealed objects that stopped being current over
// an hour ago; a failure is a warning, the change is done.
func collectSecrets(ctx context.Context, cmd *cobra.Command, b bucket.Bucket, p secrets.Place) {
	deleted, err := secrets.Collect(ctx, b, p, secretsRetention, time.Now())
	if len(deleted) > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "collected %d old sealed objects\n", len(deleted))
	}
	if err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: collecting old sealed objects (the change is done):", err)
	}
}

// warnUnknownClasses warns about classes the change names that the app's
// current version does not have, as --env does; nothing when nothing is
// deployed or the versions cannot be read.
func warnUnknownClasses(ctx context.Context, warn io.Writer, b bucket.Bucket, a app.Name, c secrets.Change) {
	cur, versions, err := deploys.List(ctx, b, a)
	if err != nil || cur.Version == "" {
		return
	}
	var given secrets.Set
	if c.Apply(&given) != nil {
		return
	}
	for _, v := range versions {
		if v.ID != cur.Version || v.Err != nil {
			continue
		}
		classes := map[string]bool{}
		for _, n := range given.Names() {
			if _, ok := v.Manifest.Classes[n.Class]; !ok {
				classes[n.Class] = true
			}
		}
		for _, class := range slices.Sorted(maps.Keys(classes)) {
			fmt.Fprintf(warn, "warning: class %s is not in the current version %s of %s (a typo?)\n", class, v.ID, a)
		}
	}
}

// rotateKey re-seals each app's current set under --new-key.
func rotateKey(cmd *cobra.Command, reg *plugin.Registry, f secretsFlags) error {
	switch {
	case f.newKey == "" || len(f.keys) == 0:
		return errors.New("--key OLD and --new-key NEW are required")
	case f.all == (f.app != ""):
		return errors.New("give --app TENANT/APP or --all")
	case !f.nodesHaveNewKey:
		return errors.New("rotate-key needs --nodes-have-new-key: give every node the new key first (a second serve --secrets-key, one node restarted at a time); a node without it answers 503 for the app")
	}
	keep := func(*secrets.Set) error { return nil }
	if !f.all {
		return secretsWrite(cmd, reg, f, secrets.Change{Apply: keep, NodesHaveKey: true}, "re-sealed under the new key")
	}
	f.keys = append([]string{f.newKey}, f.keys...)
	keys, err := loadKeys(f.keys)
	if err != nil {
		return err
	}
	b, p, err := openSecretsBucket(cmd, reg, &f)
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	apps, err := secrets.Apps(ctx, b)
	if err != nil {
		return err
	}
	if len(apps) == 0 {
		fmt.Fprintln(cmd.OutOrStdout(), "no app under the bucket's prefix has secrets")
	}
	var failed []string
	for _, a := range apps {
		p.App = a
		res, err := secrets.Write(ctx, b, p, secrets.Change{Seal: keys[0], Open: keys[1:], Apply: keep, NodesHaveKey: true})
		switch {
		case err != nil:
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", a, err)
			failed = append(failed, a.String())
		case res.NoOp:
			fmt.Fprintf(cmd.OutOrStdout(), "%s: sealed under key %s already (seq %d)\n", a, keys[0].ID(), res.To)
		default:
			fmt.Fprintf(cmd.OutOrStdout(), "%s: secrets seq %d is current, re-sealed under key %s (was seq %d)\n", a, res.To, keys[0].ID(), res.From)
			collectSecrets(ctx, cmd, b, p)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("not re-sealed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// withSecrets loads the keys, then opens the bucket and runs do on the
// app's place.
func withSecrets(cmd *cobra.Command, reg *plugin.Registry, f *secretsFlags, do func(context.Context, bucket.Bucket, secrets.Place, []secrets.Key) error) error {
	a, err := app.Parse(f.app)
	if err != nil {
		return fmt.Errorf("--app: %w", err)
	}
	keys, err := loadKeys(f.keys)
	if err != nil {
		return err
	}
	if len(keys) == 0 && cmd.Name() != "list" {
		return errors.New("--key FILE is required (make one with wasmkeep secrets new-key)")
	}
	b, p, err := openSecretsBucket(cmd, reg, f)
	if err != nil {
		return err
	}
	defer b.Close()
	p.App = a
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return do(ctx, b, p, keys)
}

func loadKeys(paths []string) ([]secrets.Key, error) {
	if len(paths) > 2 {
		return nil, errors.New("at most two keys: the current one and the next")
	}
	var keys []secrets.Key
	for _, path := range paths {
		k, err := secrets.LoadKeyFile(path)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// openSecretsBucket opens the bucket as deploy does; the place it returns
// has the bucket's prefix, which sealing binds.
func openSecretsBucket(cmd *cobra.Command, reg *plugin.Registry, f *secretsFlags) (bucket.Bucket, secrets.Place, error) {
	b, cfg, ch, err := chosenConfig(reg, "", f.cluster.layers(cmd.Flags())...)
	if err != nil {
		return nil, secrets.Place{}, err
	}
	f.lease = cfg.Cluster.Lease()
	return b, secrets.Place{Prefix: bucketPrefix(ch)}, nil
}

// bucketPrefix is the chosen bucket plugin's key prefix, which secrets
// are sealed for: its prefix setting without slashes around it, "" for a
// plugin without one (bucket-fs). The serving side uses it too, so a
// node and the CLI given the same bucket agree.
func bucketPrefix(ch config.Choice) string {
	for _, a := range ch.Settings() {
		if a.Key == "prefix" {
			return strings.Trim(a.Value.String(), "/")
		}
	}
	return ""
}
