package procnet

import (
	"net"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The process that listens owns the port; another process does not, and
// nobody owns a port once its listener is closed.
func TestListensOnTellsTheOwnerApart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port

	ok, err := ListensOn(os.Getpid(), port)
	require.NoError(t, err)
	assert.True(t, ok, "this process listens on %d", port)

	other := exec.Command("sleep", "5")
	require.NoError(t, other.Start())
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	ok, err = ListensOn(other.Process.Pid, port)
	require.NoError(t, err)
	assert.False(t, ok, "another process does not")

	require.NoError(t, l.Close())
	ok, err = ListensOn(os.Getpid(), port)
	require.NoError(t, err)
	assert.False(t, ok, "a closed listener")
}
