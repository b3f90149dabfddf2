/** The sidebar tab icon: three bars of different heights, one per trial rung. */
import { LabIcon } from '@jupyterlab/ui-components';

const svgstr = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">
  <g class="jp-icon3" fill="#616161">
    <rect x="2" y="9" width="3" height="5" rx="0.5"/>
    <rect x="6.5" y="5" width="3" height="9" rx="0.5"/>
    <rect x="11" y="2" width="3" height="12" rx="0.5"/>
  </g>
</svg>`;

export const nbtuneIcon = new LabIcon({ name: 'nbtune:icon', svgstr });
