// Package procnet tells whether a process owns a TCP listener, so that the
// harness never mistakes another run's server for its own. A server started
// on a port found free can lose the port to another run's server between the
// probe and its bind; a readiness check over the network then succeeds
// against the other server while its own exits with EADDRINUSE.
package procnet

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrUnsupported is returned where /proc cannot tell (not Linux).
var ErrUnsupported = errors.New("procnet: /proc/net is not available")

// ListensOn reports whether process pid holds a socket listening on TCP
// port (any address, IPv4 or IPv6).
func ListensOn(pid, port int) (bool, error) {
	inodes, err := listeners(port)
	if err != nil {
		return false, err
	}
	if len(inodes) == 0 {
		return false, nil
	}
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
			return true, nil
		}
	}
	return false, nil
}

// listeners returns the inodes of the sockets listening on port.
func listeners(port int) (map[string]bool, error) {
	inodes := map[string]bool{}
	found := false
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		found = true
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if !ok {
				continue
			}
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
				inodes[fields[9]] = true
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("procnet: reading %s: %w", table, err)
		}
	}
	if !found {
		return nil, ErrUnsupported
	}
	return inodes, nil
}
