import json,glob,statistics,sys,collections,os
d=sys.argv[1]
res=collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(d+'/*/*.json')):
    j=json.load(open(f)); name=f.split('/')[-2].rsplit('-r',1)[0]; rnd=f.split('/')[-2].rsplit('-',1)[0]
    if j['run']=='cold':
        res[name][j['workload']+' cold'].append(j['wall_seconds']*1000); continue
    res[name][j['workload']+' wall'].append(j['wall_seconds']*1000)
    if j['workload']=='many-wallets':
        res[name]['many p99'].append(j['latency']['p99_ms']); res[name]['many req/s'].append(j['requests_per_second'])
    else:
        res[name]['init batch p50'].append(j['latency']['p50_ms'])
for n,m in res.items():
    print(n, {k:round(statistics.median(v),2) for k,v in sorted(m.items())}, {k:len(v) for k,v in m.items()}['initial-load wall'])
