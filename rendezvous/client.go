package rendezvous

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Retry pacing of a rank that connects to rank 0.
const (
	retryFirst = 50 * time.Millisecond
	retryMax   = time.Second
	dialMax    = 5 * time.Second
)

// ReceiveID connects to rank 0 at cfg.Addr (retrying while it is not
// listening yet, or after a dropped connection, until cfg.Timeout), says
// hello and returns the unique id rank 0 hands out. A rejection by rank 0
// ends it at once with the reason.
func ReceiveID(ctx context.Context, cfg Config) (UniqueID, error) {
	if err := cfg.check(); err != nil {
		return UniqueID{}, err
	}
	if cfg.Rank == 0 {
		panic("rendezvous: ReceiveID called by rank 0, which makes the id")
	}
	timeout := cfg.timeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	log := cfg.logger().With("rank", cfg.Rank, "nranks", cfg.NRanks, "coordinator", cfg.Addr)
	session := newSession()
	wait := retryFirst
	var last error
	for attempt := 1; ; attempt++ {
		id, retry, err := receiveOnce(ctx, cfg, session)
		if err == nil {
			log.Debug("rendezvous: id received", "attempts", attempt)
			return id, nil
		}
		if !retry {
			return UniqueID{}, cfg.fail(err)
		}
		// Keep the last cause that was not the deadline itself.
		if last == nil || ctx.Err() == nil {
			last = err
		}
		if ctx.Err() == nil {
			if attempt == 1 || attempt%20 == 0 {
				log.Info("rendezvous: rank 0 not reachable yet; retrying", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(wait):
				wait = min(2*wait, retryMax)
				continue
			}
		}
		return UniqueID{}, cfg.fail(fmt.Errorf("%w (%d attempts; last: %v)", deadlineErr(ctx, timeout), attempt, last))
	}
}

// receiveOnce makes one connection; retry says whether a failure may pass
// with another attempt (no listener yet, a dropped connection).
func receiveOnce(ctx context.Context, cfg Config, session string) (id UniqueID, retry bool, err error) {
	d := net.Dialer{Timeout: dialMax}
	c, err := d.DialContext(ctx, "tcp", cfg.Addr)
	if err != nil {
		return id, true, fmt.Errorf("connect: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() }) // unblock reads when the time is up
	defer stop()
	if err := writeMsg(c, message{Type: msgHello, Protocol: Protocol, Version: Version,
		NRanks: cfg.NRanks, Rank: cfg.Rank, Token: cfg.Token, Session: session}); err != nil {
		return id, true, fmt.Errorf("%w: send hello: %v", ErrDropped, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetReadDeadline(dl)
	}
	m, err := readMsg(c)
	if err != nil {
		if ctx.Err() != nil {
			return id, true, ctx.Err()
		}
		return id, true, fmt.Errorf("%w: rank 0 closed the connection before handing out the id: %v", ErrDropped, err)
	}
	switch m.Type {
	case msgWelcome:
		if len(m.ID) != len(id) {
			return id, false, fmt.Errorf("%w: welcome carries a %d-byte id, want %d", ErrMismatch, len(m.ID), len(id))
		}
		if m.NRanks != cfg.NRanks || m.Rank != cfg.Rank {
			return id, false, fmt.Errorf("%w: welcome for rank %d of %d", ErrMismatch, m.Rank, m.NRanks)
		}
		copy(id[:], m.ID)
		if err := writeMsg(c, message{Type: msgAck, NRanks: cfg.NRanks, Rank: cfg.Rank}); err != nil {
			return id, false, fmt.Errorf("%w: acknowledge the id: %v", ErrDropped, err)
		}
		return id, false, nil
	case msgReject:
		switch m.Code {
		case codeMismatch:
			return id, false, fmt.Errorf("%w: %w: %s", ErrRejected, ErrMismatch, m.Reason)
		case codeDuplicate:
			return id, false, fmt.Errorf("%w: %w: %s", ErrRejected, ErrDuplicateRank, m.Reason)
		}
		return id, false, fmt.Errorf("%w (%s): %s", ErrRejected, m.Code, m.Reason)
	}
	return id, false, fmt.Errorf("%w: unexpected %q message from rank 0", ErrMismatch, m.Type)
}
