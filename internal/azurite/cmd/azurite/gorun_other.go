//go:build !linux

package main

// followGoRun does nothing where the kernel cannot signal a parent's death:
// there, stop the program itself, not go run.
func followGoRun() {}
