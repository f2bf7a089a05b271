//go:build !linux

package main

import "syscall"

// procAttr is nil: only Linux can kill a child when its parent dies.
func procAttr() *syscall.SysProcAttr { return nil }
