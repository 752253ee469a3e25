# Min-of-runs table of device_ab.sh JSONs: first variant in us, the others as % against it.
#   run (in a folder of unpacked outputs): python3 min_table.py base,variant,...
import json,glob,sys
vs=sys.argv[1].split(',')
data={v:[json.load(open(f)) for f in sorted(glob.glob(f'{v}_r*.json'))] for v in vs}
n=len(data[vs[0]][0]['results'])
print('shape'.ljust(26)+''.join(v.rjust(9) for v in vs))
for i in range(n):
    x=data[vs[0]][0]['results'][i]
    row=f"({x['B']},{x['L_local']},{x['H']},{x['rows']})".ljust(26)
    b=min(r['results'][i]['min_us'] for r in data[vs[0]])
    for v in vs:
        m=min(r['results'][i]['min_us'] for r in data[v])
        row+=f"{m:9.1f}" if v==vs[0] else f"{(m/b-1)*100:+8.1f}%"
    print(row)
