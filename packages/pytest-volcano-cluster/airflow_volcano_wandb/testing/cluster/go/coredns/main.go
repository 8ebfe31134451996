// CoreDNS with only the plugins the real node's cluster DNS uses: answering for Services
// and pods (kubernetes) on the node bridge's address (bind), plus errors, log and ready.
// The upstream binary links every plugin, cloud SDKs included, and takes several times as
// long to build on 2 cores.
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/bind"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
