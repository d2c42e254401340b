package redisclient

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/testcert"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		name  string
		url   string
		check func(t *testing.T, o *Options)
	}{
		{"standalone", "redis://localhost:6379", func(t *testing.T, o *Options) {
			eq(t, "Mode", o.Mode, Standalone)
			eq(t, "Addr", o.Simple.Addr, "localhost:6379")
			eq(t, "TLS", o.Simple.TLSConfig == nil, true)
		}},
		{"bare host:port (envoyproxy/ratelimit's REDIS_URL)", "127.0.0.1:6380", func(t *testing.T, o *Options) {
			eq(t, "Mode", o.Mode, Standalone)
			eq(t, "Addr", o.Simple.Addr, "127.0.0.1:6380")
			eq(t, "TLS", o.Simple.TLSConfig == nil, true)
		}},
		{"bare host:port, DNS name", "redis.default.svc:6379", func(t *testing.T, o *Options) {
			eq(t, "Addr", o.Simple.Addr, "redis.default.svc:6379")
		}},
		{"standalone with options", "redis://user:pa%40ss@127.0.0.1:6380/2?pool_size=7&dial_timeout=250ms&read_timeout=1", func(t *testing.T, o *Options) {
			eq(t, "Addr", o.Simple.Addr, "127.0.0.1:6380")
			eq(t, "Username", o.Simple.Username, "user")
			eq(t, "Password", o.Simple.Password, "pa@ss")
			eq(t, "DB", o.Simple.DB, 2)
			eq(t, "PoolSize", o.Simple.PoolSize, 7)
			eq(t, "DialTimeout", o.Simple.DialTimeout, 250*time.Millisecond)
			eq(t, "ReadTimeout", o.Simple.ReadTimeout, time.Second)
		}},
		{"standalone TLS", "rediss://redis.example:6379", func(t *testing.T, o *Options) {
			eq(t, "ServerName", o.Simple.TLSConfig.ServerName, "redis.example")
		}},
		{"unix socket", "unix:///run/redis.sock?db=3", func(t *testing.T, o *Options) {
			eq(t, "Network", o.Simple.Network, "unix")
			eq(t, "Addr", o.Simple.Addr, "/run/redis.sock")
			eq(t, "DB", o.Simple.DB, 3)
		}},
		{"sentinel", "redis+sentinel://u:p@s1:26379,s2:26380,[::1]:26381/mymaster/1?pool_size=5&sentinel_password=sp&read_timeout=200ms", func(t *testing.T, o *Options) {
			eq(t, "Mode", o.Mode, Sentinel)
			eq(t, "MasterName", o.Failover.MasterName, "mymaster")
			eq(t, "SentinelAddrs", o.Failover.SentinelAddrs, []string{"s1:26379", "s2:26380", "[::1]:26381"})
			eq(t, "Username", o.Failover.Username, "u")
			eq(t, "Password", o.Failover.Password, "p")
			eq(t, "SentinelUsername", o.Failover.SentinelUsername, "")
			eq(t, "SentinelPassword", o.Failover.SentinelPassword, "sp")
			eq(t, "DB", o.Failover.DB, 1)
			eq(t, "PoolSize", o.Failover.PoolSize, 5)
			eq(t, "ReadTimeout", o.Failover.ReadTimeout, 200*time.Millisecond)
			eq(t, "TLS", o.Failover.TLSConfig == nil, true)
		}},
		{"sentinel TLS", "rediss+sentinel://s1:26379/m", func(t *testing.T, o *Options) {
			eq(t, "MasterName", o.Failover.MasterName, "m")
			eq(t, "TLS", o.Failover.TLSConfig != nil, true)
		}},
		{"cluster", "redis+cluster://u:p@n1:7000,n2:7001?pool_size=9&read_timeout=100ms", func(t *testing.T, o *Options) {
			eq(t, "Mode", o.Mode, Cluster)
			eq(t, "Addrs", o.Cluster.Addrs, []string{"n1:7000", "n2:7001"})
			eq(t, "Username", o.Cluster.Username, "u")
			eq(t, "Password", o.Cluster.Password, "p")
			eq(t, "PoolSize", o.Cluster.PoolSize, 9)
			eq(t, "ReadTimeout", o.Cluster.ReadTimeout, 100*time.Millisecond)
			eq(t, "TLS", o.Cluster.TLSConfig == nil, true)
		}},
		{"cluster TLS", "rediss+cluster://n1:7000/", func(t *testing.T, o *Options) {
			eq(t, "TLS", o.Cluster.TLSConfig != nil, true)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ParseURL(tc.url)
			if err != nil {
				t.Fatalf("ParseURL(%q): %v", tc.url, err)
			}
			tc.check(t, o)
		})
	}
}

func eq[T any](t *testing.T, field string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %v, want %v", field, got, want)
	}
}

func TestParseURLErrors(t *testing.T) {
	tests := []struct {
		url  string
		want string // substring naming the bad part
	}{
		{"localhost", "missing scheme"},
		{"localhost:0", "missing scheme"},
		{"localhost:http", "missing scheme"},
		{"/var/run/redis.sock", "missing scheme"},
		{"http://secret@x:1", `unknown scheme "http"`},
		{"redis://u:secret@h:1?pool_size=x", "pool_size"},
		{"redis://u:secret@h:1?bogus=1", "bogus"},
		{"redis://u:secret@h:1/abc", "database"},
		{"redis://u:secret@h:1/%zz", "escape"},
		{"redis+sentinel://u:secret@s1:26379", "no master name"},
		{"redis+sentinel://u:secret@s1:26379,s2/m", `host "s2"`},
		{"redis+sentinel://u:secret@s1:26379/m/1/2", "path"},
		{"redis+sentinel://u:secret@s1:26379/m/x", "database"},
		{"redis+sentinel://u:secret@s1:26379/m?master_name=n", "twice"},
		{"redis+sentinel://u:secret@s1:26379/m?route_randomly=true", "not supported"},
		{"redis+sentinel://u:secret@s1:26379/m?pool_size=-x", "pool_size"},
		{"redis+cluster://u:secret@n1:7000/0", "database"},
		{"redis+cluster://u:secret@", "no host"},
		{"redis+cluster://u:secret@n1:99999", "port"},
		{"redis+cluster://u:secret@n1:7000,", `host ""`},
		{"redis+cluster://u:secret@n1:7000?addr=n2:7001", "addr"},
		{"redis+cluster://u:secret@n1:7000?nope=1", "nope"},
		{"redis+cluster://u:secret@n1:7000#frag", "fragment"},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			_, err := ParseURL(tc.url)
			if err == nil {
				t.Fatalf("ParseURL(%q) succeeded, want an error about %s", tc.url, tc.want)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not mention %q", msg, tc.want)
			}
			if !strings.HasPrefix(msg, "redisclient: ") {
				t.Errorf("error %q lacks the package prefix", msg)
			}
			if strings.Contains(msg, "secret") {
				t.Errorf("error %q leaks the password", msg)
			}
		})
	}
}

// writeCert writes a certificate and its key as PEM files.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	ca, err := testcert.NewCA("redisclient test CA")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue("redisclient client", 2, false)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestSetTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		url     string
		files   TLSFiles
		wantErr string
	}{
		{"none on plain URL", "redis://h:1", TLSFiles{}, ""},
		{"CA and client cert", "rediss://h:1", TLSFiles{CAFile: cert, CertFile: cert, KeyFile: key, ServerName: "other"}, ""},
		{"sentinel", "rediss+sentinel://s:1/m", TLSFiles{CAFile: cert}, ""},
		{"cluster", "rediss+cluster://n:1", TLSFiles{CertFile: cert, KeyFile: key}, ""},
		{"plain URL", "redis://h:1", TLSFiles{CAFile: cert}, "does not use TLS"},
		{"missing CA", "rediss://h:1", TLSFiles{CAFile: filepath.Join(dir, "nope.pem")}, "CA"},
		{"CA not PEM", "rediss://h:1", TLSFiles{CAFile: notPEM}, "no PEM"},
		{"cert without key", "rediss://h:1", TLSFiles{CertFile: cert}, "together"},
		{"key is not a key", "rediss://h:1", TLSFiles{CertFile: cert, KeyFile: notPEM}, "client certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ParseURL(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			err = o.SetTLS(tc.files)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("SetTLS error = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("SetTLS: %v", err)
			}
			if tc.files.IsZero() {
				return
			}
			cfg := *o.tlsConfig()
			if tc.files.CAFile != "" && cfg.RootCAs == nil {
				t.Error("RootCAs not set")
			}
			if tc.files.CertFile != "" && len(cfg.Certificates) != 1 {
				t.Errorf("%d client certificates, want 1", len(cfg.Certificates))
			}
			if tc.files.ServerName != "" && cfg.ServerName != tc.files.ServerName {
				t.Errorf("ServerName = %q, want %q", cfg.ServerName, tc.files.ServerName)
			}
		})
	}
}

// TestNewConnects builds a client from a URL for every deployment the
// harness runs, checks that it says which kind of client it is (a caller
// must not guess: see Client) and that it reaches a master that accepts
// writes.
func TestNewConnects(t *testing.T) {
	sa := redistest.SharedStandalone(t)
	cl := redistest.SharedCluster(t)
	se := redistest.SharedSentinel(t)
	tests := []struct {
		name    string
		url     string
		cluster bool
	}{
		{"standalone", "redis://" + sa.Addr + "/0?pool_size=4&dial_timeout=1s", false},
		{"cluster", "redis+cluster://" + strings.Join(cl.Addrs[:2], ",") + "?read_timeout=2s", true},
		{"sentinel", "redis+sentinel://" + strings.Join(se.SentinelAddrs, ",") + "/" + se.MasterName, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ParseURL(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			c, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if (c.Cluster != nil) != tc.cluster || (c.Single != nil) == tc.cluster {
				t.Fatalf("New(%s): Single set %v, Cluster set %v; want exactly the cluster client %v", tc.url, c.Single != nil, c.Cluster != nil, tc.cluster)
			}
			ctx := context.Background()
			key := redistest.KeyPrefix(t) + "k"
			if err := c.Universal().Set(ctx, key, "v", time.Minute).Err(); err != nil {
				t.Fatalf("SET through %s: %v", tc.url, err)
			}
			if got := c.Universal().Get(ctx, key).Val(); got != "v" {
				t.Errorf("GET = %q, want v", got)
			}
		})
	}
	for _, o := range []*Options{nil, {}} {
		if _, err := New(o); err == nil || !strings.HasPrefix(err.Error(), "redisclient: ") {
			t.Errorf("New(%v) = %v, want a redisclient error", o, err)
		}
	}
}

// TestTLSConnects connects over TLS with a client certificate, to a server
// that requires one, with the files given the way the flags give them.
func TestTLSConnects(t *testing.T) {
	srv := redistest.StandaloneTLS(t)
	f := srv.TLSFiles()
	tests := []struct {
		name   string
		files  TLSFiles
		wantOK bool
	}{
		{"CA and client certificate", TLSFiles{CAFile: f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile}, true},
		{"unknown CA", TLSFiles{CertFile: f.CertFile, KeyFile: f.KeyFile}, false},
		{"no client certificate", TLSFiles{CAFile: f.CAFile}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ParseURL("rediss://" + srv.TLSAddr + "?max_retries=-1")
			if err != nil {
				t.Fatal(err)
			}
			if err := o.SetTLS(tc.files); err != nil {
				t.Fatal(err)
			}
			c, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = c.Single.Ping(context.Background()).Err()
			if (err == nil) != tc.wantOK {
				t.Errorf("PING over TLS: err = %v, want ok=%v", err, tc.wantOK)
			}
		})
	}
}
