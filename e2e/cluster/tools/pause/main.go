// The pod sandbox's process for the local test cluster (containerd's sandbox_image): it holds
// the pod's namespaces, reaps the orphans it inherits as the pod's PID 1, and exits 0 on
// SIGINT or SIGTERM, as Kubernetes' own pause does. Built static (CGO_ENABLED=0) by build.sh
// and packed into an image by image.sh, so that nothing is pulled from a registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if os.Getpid() != 1 {
		os.Stderr.WriteString("pause: warning: not PID 1, orphans are not reaped here\n")
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
