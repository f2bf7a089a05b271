package azurite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Version is the npm version of Azurite that Install installs and Start runs.
// It is pinned so that every machine tests against the same emulator
// behaviour (lease timing, error codes, its divergences from Azure).
const Version = "3.37.0"

// AccountName is the name of Azurite's built-in development storage account.
const AccountName = "devstoreaccount1"

// AccountKey is the key of Azurite's built-in development storage account.
// It is not a secret: Microsoft publishes it in Azurite's documentation, and
// every Azurite installation accepts it.
const AccountKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

// EnvURL names an environment variable that, when set, makes Endpoint use an
// already running blob endpoint (for example
// http://127.0.0.1:10000/devstoreaccount1) instead of starting Azurite.
const EnvURL = "LEADERELECTION_AZURITE_URL"

// EnvDir names an environment variable that overrides the npm install
// prefix used by Install. The default is
// filepath.Join(os.UserCacheDir(), "leaderelection", "azurite-"+Version),
// so that the ~365 MB install is shared by all checkouts and test runs.
const EnvDir = "LEADERELECTION_AZURITE_DIR"

// installedMarker is written into the prefix only after npm has exited
// successfully. The presence of main.js alone proves nothing: an npm run
// that was killed half-way leaves the package in place with dependencies
// missing.
const installedMarker = ".leaderelection-installed"

// lockName is the file in the prefix that concurrent installers flock, so
// that test binaries started in parallel by `go test work` run npm once.
const lockName = ".leaderelection-install.lock"

// installDir returns the npm install prefix that Install uses: the value of
// EnvDir if set, otherwise a versioned directory in the user cache directory.
func installDir() (string, error) {
	if dir := os.Getenv(EnvDir); dir != "" {
		return filepath.Abs(dir)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		// No $HOME or $XDG_CACHE_HOME (some CI containers): the temp
		// directory still lets later runs on this machine reuse the install.
		cache = os.TempDir()
	}
	return filepath.Join(cache, "leaderelection", "azurite-"+Version), nil
}

// scriptPath is the blob service's entry point inside the prefix. Start runs
// it as `node <script>` rather than through node_modules/.bin/azurite-blob
// or npx: that way the PID that Start gets is the node process that owns the
// listening socket, so signalling that PID really stops the server. (Killing
// an npx PID leaves its node child listening.)
func scriptPath(dir string) string {
	return filepath.Join(dir, "node_modules", "azurite", "dist", "src", "blob", "main.js")
}

// Install makes sure azurite@Version is installed under the prefix named by
// EnvDir (default: a versioned directory in os.UserCacheDir) and
// returns the path of the blob service's script (…/azurite/dist/src/blob/main.js),
// which Start runs with node.
//
// It is idempotent and cheap once installed (two stat calls). Several
// processes may call it at once: they serialise on a flock in the prefix
// directory and only the first one runs npm. ctx bounds the wait for that
// lock and the npm run; if it ends, npm and its children are killed.
func Install(ctx context.Context) (string, error) {
	dir, err := installDir()
	if err != nil {
		return "", fmt.Errorf("azurite: install prefix: %w", err)
	}
	script := scriptPath(dir)
	if installed(dir) {
		return script, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("azurite: creating install prefix: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, lockName))
	if err != nil {
		return "", fmt.Errorf("azurite: locking install prefix %s: %w", dir, err)
	}
	defer unlock()
	// Another process may have finished the install while we waited.
	if installed(dir) {
		return script, nil
	}
	if err := npmInstall(ctx, dir); err != nil {
		return "", err
	}
	if v, err := installedVersion(dir); err != nil {
		return "", fmt.Errorf("azurite: npm succeeded but the package is not usable in %s: %w", dir, err)
	} else if v != Version {
		return "", fmt.Errorf("azurite: npm installed azurite %s in %s, want %s", v, dir, Version)
	}
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("azurite: npm succeeded but the blob service script is missing: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, installedMarker), []byte(Version+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("azurite: marking install complete: %w", err)
	}
	return script, nil
}

// installed reports whether a previous Install completed in dir.
func installed(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, installedMarker))
	if err != nil || strings.TrimSpace(string(b)) != Version {
		return false
	}
	_, err = os.Stat(scriptPath(dir))
	return err == nil
}

// installedVersion reads the version of the azurite package npm put in dir.
func installedVersion(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", "azurite", "package.json"))
	if err != nil {
		return "", err
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		return "", fmt.Errorf("parsing azurite's package.json: %w", err)
	}
	return pkg.Version, nil
}

// npmInstall runs npm and turns its failures into errors that say why.
func npmInstall(ctx context.Context, dir string) error {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("azurite: npm is not in PATH (%w): install Node.js and npm, "+
			"or point %s at a running Azurite blob endpoint", err, EnvURL)
	}
	out := newTail(4096)
	cmd := exec.CommandContext(ctx, npm, "install", "--prefix", dir, "azurite@"+Version,
		"--no-audit", "--no-fund", "--no-update-notifier")
	cmd.Dir = dir
	cmd.Stdout = out
	cmd.Stderr = out
	// npm runs package scripts in child processes: put them all in one
	// process group so that a cancelled ctx kills the whole tree, not just npm.
	cmd.SysProcAttr = groupProcAttr()
	cmd.Cancel = func() error { return killGroup(cmd.Process) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err = cmd.Run()
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("azurite: npm install azurite@%s into %s stopped after %s: %w; npm's last output:\n%s",
			Version, dir, time.Since(start).Round(time.Millisecond), ctxErr, lastLines(out.String(), 20))
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return fmt.Errorf("azurite: npm install azurite@%s into %s failed (%v); npm's last output:\n%s",
			Version, dir, exitErr, lastLines(out.String(), 20))
	}
	return fmt.Errorf("azurite: running %s: %w", npm, err)
}

// lastLines returns the last n lines of s, which is enough of npm's output to
// show the actual error without its pages of deprecation warnings.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
