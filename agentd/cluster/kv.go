package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// kv is the handful of Redis commands cluster mode sends outside its
// subscriptions. The default is go-redis's pooled client; the
// store-cancel-reply fault swaps in respPool.
type kv interface {
	Get(ctx context.Context, key string) (val string, ok bool, err error)
	Set(ctx context.Context, key, val string, ttl time.Duration) error
	Del(ctx context.Context, keys ...string) error
	// Hold adds member to the sorted set key until expires (its score),
	// drops the members whose time passed, keeps the set until the last
	// expiry, and returns how many members it holds now.
	Hold(ctx context.Context, key, member string, expires time.Time) (int64, error)
	// Count is how many members of the sorted set key have not expired.
	Count(ctx context.Context, key string) (int64, error)
	// Drop removes member from the sorted set key.
	Drop(ctx context.Context, key, member string) error
	// Publish returns how many subscribers received msg.
	Publish(ctx context.Context, channel, msg string) (int64, error)
	// Push appends val to the list key and sets the list to expire in ttl.
	Push(ctx context.Context, key, val string, ttl time.Duration) error
	// Pop takes the list key's first element, waiting up to wait for one
	// (ok false: none came).
	Pop(ctx context.Context, key string, wait time.Duration) (val string, ok bool, err error)
	Close() error
}

// goRedis is kv over go-redis: a command cancelled by its context closes
// its connection, so no reply is ever left for the next caller.
type goRedis struct{ c *redis.Client }

func (g goRedis) Get(ctx context.Context, key string) (string, bool, error) {
	v, err := g.c.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("redis GET %s: %w", key, err)
	}
	return v, true, nil
}

func (g goRedis) Set(ctx context.Context, key, val string, ttl time.Duration) error {
	if err := g.c.Set(ctx, key, val, ttl).Err(); err != nil {
		return fmt.Errorf("redis SET %s: %w", key, err)
	}
	return nil
}

func (g goRedis) Del(ctx context.Context, keys ...string) error {
	if err := g.c.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("redis DEL %v: %w", keys, err)
	}
	return nil
}

func (g goRedis) Hold(ctx context.Context, key, member string, expires time.Time) (int64, error) {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	var card *redis.IntCmd
	_, err := g.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRemRangeByScore(ctx, key, "-inf", now)
		p.ZAdd(ctx, key, redis.Z{Score: float64(expires.UnixMilli()), Member: member})
		p.PExpireAt(ctx, key, expires) // only ever later: every hold expires at least as late as the last
		card = p.ZCard(ctx, key)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("redis ZADD %s: %w", key, err)
	}
	return card.Val(), nil
}

func (g goRedis) Count(ctx context.Context, key string) (int64, error) {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	n, err := g.c.ZCount(ctx, key, "("+now, "+inf").Result()
	if err != nil {
		return 0, fmt.Errorf("redis ZCOUNT %s: %w", key, err)
	}
	return n, nil
}

func (g goRedis) Drop(ctx context.Context, key, member string) error {
	if err := g.c.ZRem(ctx, key, member).Err(); err != nil {
		return fmt.Errorf("redis ZREM %s: %w", key, err)
	}
	return nil
}

func (g goRedis) Publish(ctx context.Context, channel, msg string) (int64, error) {
	n, err := g.c.Publish(ctx, channel, msg).Result()
	if err != nil {
		return 0, fmt.Errorf("redis PUBLISH %s: %w", channel, err)
	}
	return n, nil
}

func (g goRedis) Push(ctx context.Context, key, val string, ttl time.Duration) error {
	_, err := g.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.RPush(ctx, key, val)
		p.PExpire(ctx, key, ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis RPUSH %s: %w", key, err)
	}
	return nil
}

func (g goRedis) Pop(ctx context.Context, key string, wait time.Duration) (string, bool, error) {
	v, err := g.c.BLPop(ctx, wait, key).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("redis BLPOP %s: %w", key, err)
	}
	return v[1], true, nil
}

// Close does nothing: the client is the cluster's (it closes it).
func (g goRedis) Close() error { return nil }
