package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/tools/etcdpeer"
	"github.com/blobelect/leaderelection/internal/tools/procnet"
)

// startSlots bounds how many servers the runs of one process start at
// once: a benchmark starts dozens of runs together, and as many Node.js
// processes starting at the same time on a small machine can take longer
// than Azurite's start timeout.
var startSlots = make(chan struct{}, 4)

// startStorage starts the server the fleet needs (account i's, of a
// quorum's), its data and log under the run's directory, and returns the
// address the proxies forward to. A start that fails is tried again, twice.
func (h *harness) startStorage(ctx context.Context, i int) (upstream string, closeLog func(), err error) {
	select {
	case startSlots <- struct{}{}:
	case <-ctx.Done():
		return "", nil, ctx.Err()
	}
	defer func() { <-startSlots }()
	for attempt := 1; ; attempt++ {
		upstream, closeLog, err = h.startStorageOnce(ctx, i)
		if err == nil || attempt == 3 || ctx.Err() != nil {
			return upstream, closeLog, err
		}
		h.progress("%v; trying again", err)
	}
}

func (h *harness) startStorageOnce(ctx context.Context, i int) (upstream string, closeLog func(), err error) {
	name := accountName("azurite", i)
	if h.etcd {
		name = "etcd"
	}
	log, err := os.OpenFile(filepath.Join(h.cfg.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return "", nil, err
	}
	closeLog = func() { log.Close() }
	if h.etcd {
		srv, err := etcdpeer.Start(ctx, etcdpeer.Options{Dir: filepath.Join(h.cfg.Dir, "etcd-data"), Log: log})
		if err != nil {
			closeLog()
			return "", nil, fmt.Errorf("chaos: starting etcd: %w", err)
		}
		h.store = srv
		return srv.Endpoint(), closeLog, nil
	}
	for attempt := 1; ; attempt++ {
		srv, err := azurite.Start(ctx, azurite.Options{Location: filepath.Join(h.cfg.Dir, name+"-data"), Log: log})
		if err != nil {
			closeLog()
			return "", nil, fmt.Errorf("chaos: starting Azurite: %w", err)
		}
		addr := strings.TrimPrefix(strings.TrimSuffix(srv.URL(), "/"+azurite.AccountName), "http://")
		// Runs in parallel each start an Azurite on a port found free; two
		// may pick the same one, and the loser's readiness probe is then
		// answered by the winner's Azurite while its own exits, unable to
		// bind. Two runs sharing one Azurite would share its restarts and
		// its end: make sure the listener is ours.
		_, port, _ := strings.Cut(addr, ":")
		n, _ := strconv.Atoi(port)
		if ok, err := procnet.ListensOn(srv.PID(), n); err == nil && !ok {
			_ = srv.Stop()
			if attempt < 5 {
				continue
			}
			closeLog()
			return "", nil, fmt.Errorf("chaos: Azurite on port %d answered, but it was not the one we started (%d attempts)", n, attempt)
		}
		if i == 0 {
			h.store = srv
		} else {
			h.more = append(h.more, srv)
		}
		return addr, closeLog, nil
	}
}
