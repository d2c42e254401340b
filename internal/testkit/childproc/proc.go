package childproc

import (
	"errors"
	"os/exec"
	"syscall"
	"time"
)

// Proc is one child process started by Start. Every test and the bench
// start their children through it, so that each runs in its own process
// group (a signal to the group reaches anything it forks), dies with its
// starter when that dies without cleaning up, and is reaped exactly once.
type Proc struct {
	// Cmd is the started command; its Process is set.
	Cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's, written before done is closed
}

// Start starts cmd in a process group of its own, with SIGKILL as its
// parent-death signal, and reaps it on a goroutine that ends when it exits;
// onExit, if any, then runs (closing the file the output went to, say)
// before Done is closed.
func Start(cmd *exec.Cmd, onExit ...func()) (*Proc, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		for _, f := range onExit {
			f()
		}
		close(p.done)
	}()
	return p, nil
}

// Done is closed when the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitCode is the exit code (-1 for a signal); it is 0 until Done is
// closed.
func (p *Proc) ExitCode() int {
	select {
	case <-p.done:
		return ExitCode(p.err)
	default:
		return 0
	}
}

// Wait waits for the exit and returns cmd.Wait's error.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// Pid is the process's id, which is also its process group's.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// SignalGroup sends sig to the process group.
func (p *Proc) SignalGroup(sig syscall.Signal) {
	// The negative pid addresses the whole group.
	_ = syscall.Kill(-p.Pid(), sig)
}

// Kill sends SIGKILL to the process group, as a crash would end it, and
// waits for the process to be reaped. It is safe to call more than once.
func (p *Proc) Kill() {
	p.SignalGroup(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM to the process group and waits up to grace for the
// process to exit, then kills the group; it reports whether the process
// exited within grace. Anything the child forked and left goes too.
func (p *Proc) Stop(grace time.Duration) bool {
	p.SignalGroup(syscall.SIGTERM)
	exited := true
	select {
	case <-p.done:
	case <-time.After(grace):
		exited = false
	}
	p.Kill()
	return exited
}

// ExitCode is the exit code an exec error carries: 0 for nil, -1 for an
// error that is no exit (a signal, a failed start).
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
