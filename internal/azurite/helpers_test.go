package azurite

import (
	"fmt"
	"testing"
)

// noErr stops the test if err is not nil. (The package's tests avoid testify
// to keep go.sum unchanged.)
func noErr(t *testing.T, err error, what ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: unexpected error: %v", fmt.Sprint(what...), err)
	}
}

// check stops the test if ok is false.
func check(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Fatalf(format, args...)
	}
}
