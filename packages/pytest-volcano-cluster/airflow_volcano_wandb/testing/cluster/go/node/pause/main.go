// The pod sandbox's process: it holds the pod's namespaces open until the runtime stops it.
// Built here because the usual pause image comes from a registry this project may not use.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
