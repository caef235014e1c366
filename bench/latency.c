/*
 * One-statement latency under concurrency, for the snowflake_id benchmark.
 *
 * pgbench's per-transaction log reads the clock lazily: a statement whose
 * result is already waiting when pgbench looks is logged with latency 0, so
 * its percentiles are not usable on a busy 2-core machine. This client
 * times every statement itself with CLOCK_MONOTONIC.
 *
 * usage: latency SOCKET_DIR PORT CLIENTS SECONDS SQL
 * prints: statements_per_second p50_ms p99_ms p999_ms
 */
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct client {
	const char *conninfo;
	const char *sql;
	double		seconds;
	double	   *lat;			/* ms */
	size_t		n, cap;
	int			failed;
};

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *
run(void *arg)
{
	struct client *c = arg;
	PGconn	   *conn = PQconnectdb(c->conninfo);
	PGresult   *res;
	double		end;

	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "connect: %s", PQerrorMessage(conn));
		c->failed = 1;
		return NULL;
	}
	res = PQprepare(conn, "s", c->sql, 0, NULL);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		fprintf(stderr, "prepare: %s", PQerrorMessage(conn));
		c->failed = 1;
		return NULL;
	}
	PQclear(res);
	end = now_s() + c->seconds;
	for (;;)
	{
		double		t0 = now_s(), t1;

		if (t0 >= end)
			break;
		res = PQexecPrepared(conn, "s", 0, NULL, NULL, NULL, 0);
		t1 = now_s();
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			fprintf(stderr, "execute: %s", PQerrorMessage(conn));
			c->failed = 1;
			break;
		}
		PQclear(res);
		if (c->n == c->cap)
		{
			c->cap = c->cap ? c->cap * 2 : 65536;
			c->lat = realloc(c->lat, c->cap * sizeof(double));
			if (c->lat == NULL)
			{
				c->failed = 1;
				break;
			}
		}
		c->lat[c->n++] = (t1 - t0) * 1000;
	}
	PQfinish(conn);
	return NULL;
}

static int
cmp(const void *a, const void *b)
{
	double		x = *(const double *) a, y = *(const double *) b;

	return (x > y) - (x < y);
}

int
main(int argc, char **argv)
{
	char		conninfo[1024];
	int			clients;
	double		seconds;
	struct client *cs;
	pthread_t  *ts;
	double	   *all;
	size_t		total = 0, k = 0;

	if (argc != 6)
	{
		fprintf(stderr, "usage: latency SOCKET_DIR PORT CLIENTS SECONDS SQL\n");
		return 2;
	}
	snprintf(conninfo, sizeof(conninfo), "host=%s port=%s user=postgres dbname=postgres", argv[1], argv[2]);
	clients = atoi(argv[3]);
	seconds = atof(argv[4]);
	cs = calloc(clients, sizeof(*cs));
	ts = calloc(clients, sizeof(*ts));
	for (int i = 0; i < clients; i++)
	{
		cs[i].conninfo = conninfo;
		cs[i].sql = argv[5];
		cs[i].seconds = seconds;
		pthread_create(&ts[i], NULL, run, &cs[i]);
	}
	for (int i = 0; i < clients; i++)
	{
		pthread_join(ts[i], NULL);
		if (cs[i].failed)
			return 1;
		total += cs[i].n;
	}
	all = malloc(total * sizeof(double));
	for (int i = 0; i < clients; i++)
		for (size_t j = 0; j < cs[i].n; j++)
			all[k++] = cs[i].lat[j];
	qsort(all, total, sizeof(double), cmp);
#define PCT(p) all[(size_t) ((p) * (total - 1))]
	printf("%.1f %.4f %.4f %.4f\n", total / seconds, PCT(0.50), PCT(0.99), PCT(0.999));
	return 0;
}
