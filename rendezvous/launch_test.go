package rendezvous

import (
	"testing"

	"dflash/internal/testerr"
)

// TestParseLaunch: flags over the torchrun environment, defaults for a job
// of one rank, and every inconsistent value an error naming its source.
func TestParseLaunch(t *testing.T) {
	none := LaunchFlags{Rank: -1, WorldSize: -1}
	cases := []struct {
		name  string
		flags LaunchFlags
		env   map[string]string
		want  Launch
		err   string // substring of the error; "" for none
	}{
		{name: "nothing: one rank", flags: none, want: Launch{WorldSize: 1}},
		{name: "torchrun", flags: none,
			env:  map[string]string{"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"},
			want: Launch{Rank: 5, WorldSize: 8, LocalRank: 1, Addr: "node0:29500"}},
		{name: "ipv6 master", flags: none,
			env:  map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "fd00::1", "MASTER_PORT": "29500"},
			want: Launch{Rank: 1, WorldSize: 2, LocalRank: 1, Addr: "[fd00::1]:29500"}},
		{name: "flags only, local rank is the rank", flags: LaunchFlags{Rank: 1, WorldSize: 2, Addr: "10.0.0.1:4000"},
			want: Launch{Rank: 1, WorldSize: 2, LocalRank: 1, Addr: "10.0.0.1:4000"}},
		{name: "flags win over the environment", flags: LaunchFlags{Rank: 0, WorldSize: 4, Addr: "h:1"},
			env:  map[string]string{"RANK": "3", "WORLD_SIZE": "8", "MASTER_ADDR": "x", "MASTER_PORT": "2"},
			want: Launch{Rank: 0, WorldSize: 4, LocalRank: 0, Addr: "h:1"}},
		{name: "one rank needs no address", flags: LaunchFlags{Rank: 0, WorldSize: 1}, want: Launch{WorldSize: 1}},
		{name: "rank past the world", flags: LaunchFlags{Rank: 2, WorldSize: 2, Addr: "h:1"}, err: "--rank 2 is outside the world of 2 ranks (--world-size): want 0..1"},
		{name: "env rank past flag world", flags: LaunchFlags{Rank: -1, WorldSize: 2, Addr: "h:1"}, env: map[string]string{"RANK": "3"},
			err: "RANK (environment) 3 is outside the world of 2 ranks (--world-size)"},
		{name: "named by the caller", flags: LaunchFlags{Rank: 4, WorldSize: 2, RankName: "run.yaml line 3: rank"}, err: "run.yaml line 3: rank 4 is outside"},
		{name: "world of zero", flags: LaunchFlags{Rank: -1, WorldSize: 0}, err: "--world-size 0: the world size must be at least 1"},
		{name: "bad RANK", flags: none, env: map[string]string{"RANK": "one"}, err: `RANK="one": not an integer`},
		{name: "bad WORLD_SIZE", flags: none, env: map[string]string{"WORLD_SIZE": "2x"}, err: `WORLD_SIZE="2x": not an integer`},
		{name: "bad LOCAL_RANK", flags: none, env: map[string]string{"LOCAL_RANK": "-"}, err: `LOCAL_RANK="-": not an integer`},
		{name: "local rank past the rank", flags: LaunchFlags{Rank: 1, WorldSize: 2, Addr: "h:1"}, env: map[string]string{"LOCAL_RANK": "2"},
			err: "LOCAL_RANK (environment) 2: want 0..1"},
		{name: "several ranks, no address", flags: LaunchFlags{Rank: 0, WorldSize: 2}, err: "--world-size 2: a job of several ranks needs the rendezvous address"},
		{name: "address without port", flags: LaunchFlags{Rank: 0, WorldSize: 2, Addr: "node0"}, err: `--rendezvous "node0": want host:port`},
		{name: "address with a bad port", flags: LaunchFlags{Rank: 0, WorldSize: 2, Addr: "node0:99999"}, err: `--rendezvous "node0:99999": port "99999"`},
		{name: "master addr alone", flags: none, env: map[string]string{"WORLD_SIZE": "2", "MASTER_ADDR": "node0"}, err: "MASTER_ADDR=node0 is set but MASTER_PORT is not"},
		{name: "master port alone", flags: none, env: map[string]string{"WORLD_SIZE": "2", "MASTER_PORT": "1"}, err: "MASTER_PORT=1 is set but MASTER_ADDR is not"},
		{name: "bad master port", flags: none, env: map[string]string{"MASTER_ADDR": "a", "MASTER_PORT": "http"}, err: `MASTER_PORT="http": port "http"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseLaunch(c.flags, func(k string) string { return c.env[k] })
			if testerr.Want(t, err, c.err) {
				return
			}
			if got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}
