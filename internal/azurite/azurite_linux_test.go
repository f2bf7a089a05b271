package azurite

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a program that starts Azurite and
// then gets killed; see TestAzuriteDiesWithItsParent.
const helperEnv = "AZURITE_TEST_HELPER_START_AND_HANG"

// TestAzuriteDiesWithItsParent runs this test binary as a child that starts
// Azurite, SIGKILLs the child (no deferred Stop can run), and checks that
// Azurite went with it, thanks to Pdeathsig.
func TestAzuriteDiesWithItsParent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperStartAndHang$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	noErr(t, err)
	noErr(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	var pid int
	var blobURL string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if n, _ := fmt.Sscanf(sc.Text(), "AZURITE %d %s", &pid, &blobURL); n == 2 {
			break
		}
	}
	if pid == 0 {
		t.Fatalf("helper did not report a started Azurite (scan error: %v)", sc.Err())
	}
	noErr(t, cmd.Process.Kill())
	_ = cmd.Wait()

	requireClosed(t, portOf(t, blobURL))
	// The process may linger briefly as a zombie until init reaps it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Azurite pid %d still running after its parent was killed: %s", pid, stat)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHelperStartAndHang is the child of TestAzuriteDiesWithItsParent. In a
// normal test run (helperEnv unset) it does nothing.
func TestHelperStartAndHang(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	s, err := Start(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("AZURITE %d %s\n", s.PID(), s.URL())
	select {} // until killed
}
