package childproc

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

const envEcho = "CHILDPROC_TEST_ECHO"

type echoed struct{ Line string }

// TestMain lets the test start this binary as an echoing child.
func TestMain(m *testing.M) {
	Maybe(envEcho, "echo child", func(struct{}) error {
		rec := NewRecorder(func(*echoed) {})
		ctx, stop := ContextWithInput(func(line string) { rec.Write(echoed{Line: line}) })
		defer stop()
		<-ctx.Done()
		return nil
	})
	goleak.VerifyTestMain(m)
}

// Lines sent to a child reach it in order, also those sent while it was
// frozen; sending to one that has exited fails.
func TestSendReachesTheChildInOrder(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	log := NewLog[echoed](nil)
	p, err := Start(Spec[echoed]{
		Command: []string{exe}, Env: envEcho, Config: struct{}{}, Log: filepath.Join(t.TempDir(), "child.log"),
		Started: func(int) {}, Record: log.Add, Exited: func(string) {},
	})
	require.NoError(t, err)
	require.NoError(t, p.Send("one", time.Second))
	p.Freeze()
	require.NoError(t, p.Send("two", time.Second), "a frozen child's pipe holds the line")
	p.Thaw()
	require.NoError(t, p.Send("three", time.Second))
	_, ok := log.Wait(context.Background(), 10*time.Second, func() bool { return len(log.Records()) == 3 })
	require.True(t, ok, "got %v", log.Records())
	assert.Equal(t, []echoed{{"one"}, {"two"}, {"three"}}, log.Records())
	assert.Error(t, p.Send("a\nb", time.Second), "one line at a time")

	assert.Empty(t, Stop([]*Process{p}, 10*time.Second))
	assert.Error(t, p.Send("four", time.Second), "the child has exited")
}
