// A Go program using cgo (so it links libc dynamically and the shim loads): dials a loopback
// listener, reads a file, runs a child process and calls C.
package main

// #include <stdlib.h>
// static int twice(int x) { return 2 * x; }
import "C"

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
)

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("hello from server"))
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		panic(err)
	}
	buf := make([]byte, 64)
	n, _ := c.Read(buf)
	c.Close()
	data, _ := os.ReadFile("/etc/hostname")
	out, _ := exec.Command("echo", "child").Output()
	addrs, _ := net.LookupHost("localhost")
	fmt.Printf("read=%q file=%t child=%q c=%d lookup=%t\n", string(buf[:n]), len(data) > 0,
		strings.TrimSpace(string(out)), int(C.twice(21)), len(addrs) > 0)
}
