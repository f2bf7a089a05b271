package procstat

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCPUGrowsAsThisProcessWorks(t *testing.T) {
	before, err := CPU(os.Getpid())
	require.NoError(t, err)
	x := 0
	for start := time.Now(); time.Since(start) < 200*time.Millisecond; {
		x++
	}
	after, err := CPU(os.Getpid())
	require.NoError(t, err)
	assert.Greater(t, after, before, "200 ms of spinning (%d turns)", x)
	_, err = CPU(-1)
	assert.Error(t, err)
}
